//! Joins with a one-row side become constants: the documented way to apply a model,
//! `calibrate(t.p, m.model, t.site) … FROM t CROSS JOIN m`, costs O(rows + model), not
//! O(rows × model).
//!
//! A join repeats its one-row side into every output row, so a model with thousands of field
//! keys would be copied into every row of every batch. [`ConstantJoinPlanner`], the session's
//! query planner, first evaluates such a side once and puts its values into the plan as
//! literals:
//!
//! 1. **Which joins.** A join without join keys or with a `true` condition (`CROSS JOIN`,
//!    `JOIN m ON m.name = 'x'` once the filter is pushed into `m`), inner, or outer on the
//!    side that is kept. Its side is evaluated if it cannot have more than one row (an
//!    aggregate without `GROUP BY`, `LIMIT 1`, …), or if it is a scan of a table (through
//!    projections, filters, aliases, limits), then with `LIMIT 2`, which reads a batch.
//! 2. **What it becomes.** Exactly one row: a projection of the other side that adds the row's
//!    values as literals, under the join's own schema. No row: an empty relation for an inner
//!    join, NULL literals for the side an outer join keeps. Two rows or more: the join is
//!    left as it was.
//! 3. **Where the literals go.** The literal columns are substituted into the expressions of
//!    the projections, aggregates, filters and sorts above, through aliases and the joins that
//!    keep every row, so `calibrate` receives the model as one scalar and parses it once per
//!    batch. The plan is then optimised again, which prunes the literal columns no one reads.
//!    Every node keeps its schema (names, types, nullability), so results do not change.
//!
//! `EXPLAIN` plans are not rewritten (planning must not run a query); `EXPLAIN ANALYZE` is.
//! A scalar subquery, `calibrate(p, (SELECT model FROM m), site)`, needs none of this:
//! DataFusion evaluates an uncorrelated scalar subquery once and passes it as a scalar.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Column, DFSchemaRef, Result, ScalarValue};
use datafusion::execution::context::QueryPlanner;
use datafusion::execution::session_state::SessionState;
use datafusion::execution::SessionStateBuilder;
use datafusion::logical_expr::{
    Aggregate, EmptyRelation, Expr, Filter, JoinType, LogicalPlan, LogicalPlanBuilder, Projection,
    Sort,
};
use datafusion::optimizer::optimize_projections::OptimizeProjections;
use datafusion::optimizer::{Optimizer, OptimizerRule};
use datafusion::physical_plan::{collect, ExecutionPlan};
use datafusion::physical_planner::{DefaultPhysicalPlanner, PhysicalPlanner};
use datafusion::prelude::SessionContext;
use futures::future::BoxFuture;
use futures::FutureExt;

/// The query planner of calibsql's sessions: DataFusion's, after joins with a one-row side
/// have become constants (see the module documentation).
#[derive(Debug, Default)]
pub struct ConstantJoinPlanner;

#[async_trait]
impl QueryPlanner for ConstantJoinPlanner {
    async fn create_physical_plan(
        &self,
        logical_plan: &LogicalPlan,
        session: &dyn Session,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let planner = DefaultPhysicalPlanner::default();
        let Some(state) = session.as_any().downcast_ref::<SessionState>() else {
            return planner.create_physical_plan(logical_plan, session).await;
        };
        match inline_one_row_joins(logical_plan, state).await? {
            Some(plan) => planner.create_physical_plan(&plan, session).await,
            None => planner.create_physical_plan(logical_plan, session).await,
        }
    }
}

/// A session built from `builder` with [`ConstantJoinPlanner`] as its query planner.
pub fn with_constant_joins(builder: SessionStateBuilder) -> SessionContext {
    SessionContext::new_with_state(
        builder
            .with_query_planner(Arc::new(ConstantJoinPlanner))
            .build(),
    )
}

/// `plan` (an optimised plan) with its one-row joins made constants and optimised again, or
/// `None` when it has no such join.
pub async fn inline_one_row_joins(
    plan: &LogicalPlan,
    state: &SessionState,
) -> Result<Option<LogicalPlan>> {
    if matches!(plan, LogicalPlan::Explain(_)) {
        return Ok(None);
    }
    let rewritten = rewrite(plan, state).await?;
    if !rewritten.changed {
        return Ok(None);
    }
    optimize(rewritten.plan, state).map(Some)
}

/// Prunes what the rewrite left unread: the literal columns of the projections that replaced
/// joins, which a `ProjectionExec` would otherwise repeat into every row. Only DataFusion's
/// `optimize_projections` rule runs: the plan is optimised already, and its other rules (and
/// the analyzer's) are not written to run twice (`push_down_leaf_projections` names its
/// extracted columns again and clashes with its own names of the first run).
fn optimize(plan: LogicalPlan, state: &SessionState) -> Result<LogicalPlan> {
    let rules: Vec<Arc<dyn OptimizerRule + Send + Sync>> =
        vec![Arc::new(OptimizeProjections::new())];
    Optimizer::with_rules(rules).optimize(plan, state, |_, _| {})
}

/// Columns of a plan's output whose value is one literal in every row.
type Constants = HashMap<Column, Expr>;

/// A rewritten plan, the constant columns of its output, and whether anything changed.
struct Rewritten {
    plan: LogicalPlan,
    constants: Constants,
    changed: bool,
    /// For a join whose small side has a few rows holding models: the join as one plan per
    /// row of that side (its other side with the row's values as constants), for the node
    /// above to compute on each (see [`distribute`]).
    branches: Option<Vec<Rewritten>>,
}

impl Rewritten {
    fn new(plan: LogicalPlan, constants: Constants, changed: bool) -> Self {
        Rewritten {
            plan,
            constants,
            changed,
            branches: None,
        }
    }
}

/// Rewrites the inputs of `plan` first, then `plan` itself.
fn rewrite<'a>(plan: &'a LogicalPlan, state: &'a SessionState) -> BoxFuture<'a, Result<Rewritten>> {
    async move {
        let mut inputs: Vec<Rewritten> = Vec::new();
        for input in plan.inputs() {
            inputs.push(rewrite(input, state).await?);
        }
        let changed = inputs.iter().any(|i| i.changed);
        let input_constants: Vec<Constants> = inputs.iter().map(|i| i.constants.clone()).collect();
        let branches = match inputs.as_mut_slice() {
            [only] => only.branches.take(),
            _ => None,
        };
        let mut new_inputs = inputs.into_iter().map(|i| i.plan);
        let plan = if changed {
            plan.clone()
                .map_children(|_| {
                    Ok(Transformed::yes(
                        new_inputs.next().expect("one rewritten plan per input"),
                    ))
                })?
                .data
        } else {
            plan.clone()
        };
        if let Some(branches) = branches {
            if let Some(done) = distribute(&plan, &branches, &input_constants)? {
                return Ok(done);
            }
        }
        if let LogicalPlan::Join(join) = &plan {
            if let Some(done) = constant_join(join, &input_constants, state).await? {
                return Ok(done);
            }
        }
        let (plan, substituted) = substitute(plan, &input_constants)?;
        let constants = output_constants(&plan, &input_constants);
        Ok(Rewritten::new(plan, constants, changed || substituted))
    }
    .boxed()
}

/// `node` (whose one input is a join with `branches`) computed on each branch, when that is
/// what the node computes on the join: a filter stays a set of branches for the node above,
/// a projection becomes the union of its branches, and so does an aggregate whose groups
/// never mix two branches (a group key is a different constant in each). `None` otherwise.
fn distribute(
    node: &LogicalPlan,
    branches: &[Rewritten],
    input_constants: &[Constants],
) -> Result<Option<Rewritten>> {
    if !matches!(
        node,
        LogicalPlan::Filter(_) | LogicalPlan::Projection(_) | LogicalPlan::Aggregate(_)
    ) {
        return Ok(None);
    }
    let mut computed = Vec::with_capacity(branches.len());
    for branch in branches {
        let mut input = Some(branch.plan.clone());
        let on_branch = node
            .clone()
            .map_children(|_| Ok(Transformed::yes(input.take().expect("one input"))))?
            .data;
        let constants = std::slice::from_ref(&branch.constants);
        let (plan, _) = substitute(on_branch, constants)?;
        let out = output_constants(&plan, constants);
        computed.push(Rewritten::new(plan, out, true));
    }
    match node {
        LogicalPlan::Filter(_) => {
            let (plan, _) = substitute(node.clone(), input_constants)?;
            let constants = output_constants(&plan, input_constants);
            Ok(Some(Rewritten {
                branches: Some(computed),
                ..Rewritten::new(plan, constants, true)
            }))
        }
        LogicalPlan::Aggregate(a) if !separates_branches(a.group_expr.len(), &computed) => Ok(None),
        _ => Ok(Some(Rewritten::new(
            union_as(node.schema(), computed)?,
            Constants::new(),
            true,
        ))),
    }
}

/// The union of `branches` (each with the schema `schema`) under `schema`'s own qualified
/// names. A union's schema has names without qualifiers, so each branch names its columns
/// `__calibsql_branch_{i}` (unique even where two qualifiers share a name) and a projection
/// above the union gives them back their qualified names.
fn union_as(schema: &DFSchemaRef, branches: Vec<Rewritten>) -> Result<LogicalPlan> {
    let positional = |i: usize| format!("__calibsql_branch_{i}");
    let mut union: Option<LogicalPlanBuilder> = None;
    for branch in branches {
        let renamed: Vec<Expr> = schema
            .columns()
            .into_iter()
            .enumerate()
            .map(|(i, c)| Expr::Column(c).alias(positional(i)))
            .collect();
        let branch = LogicalPlanBuilder::from(branch.plan)
            .project(renamed)?
            .build()?;
        union = Some(match union {
            None => LogicalPlanBuilder::from(branch),
            Some(u) => u.union(branch)?,
        });
    }
    let union = union.expect("two branches or more").build()?;
    let named: Vec<Expr> = schema
        .iter()
        .enumerate()
        .map(|(i, (q, f))| {
            Expr::Column(Column::from_name(positional(i))).alias_qualified(q.cloned(), f.name())
        })
        .collect();
    Ok(LogicalPlan::Projection(Projection::try_new_with_schema(
        named,
        Arc::new(union),
        Arc::clone(schema),
    )?))
}

/// Whether the aggregates computed on each branch have a group key that is a constant of a
/// different value in every branch, so no group gathers rows of two branches.
fn separates_branches(groups: usize, computed: &[Rewritten]) -> bool {
    let keys_of = |b: &Rewritten| -> Option<Vec<Option<ScalarValue>>> {
        let LogicalPlan::Aggregate(a) = &b.plan else {
            return None;
        };
        Some(
            a.group_expr
                .iter()
                .map(|e| match unalias(e) {
                    Expr::Literal(v, _) => Some(v),
                    _ => None,
                })
                .collect(),
        )
    };
    let Some(keys) = computed.iter().map(keys_of).collect::<Option<Vec<_>>>() else {
        return false;
    };
    (0..groups).any(|g| {
        let values: Option<Vec<&ScalarValue>> = keys.iter().map(|k| k[g].as_ref()).collect();
        values.is_some_and(|v| {
            let distinct: std::collections::HashSet<&ScalarValue> = v.iter().copied().collect();
            distinct.len() == v.len()
        })
    })
}

/// The most rows of a join's side that are evaluated while planning.
const MAX_SIDE_ROWS: usize = 64;

/// The join rewritten when one side is a few rows: a projection of its other side with the
/// values as literals for one row, an empty relation (or NULLs for an outer join) for none;
/// for 2 to [`MAX_SIDE_ROWS`] rows the join over those rows as literals, with one branch per
/// row when the rows hold models and the other side is a table read. `None` otherwise.
async fn constant_join(
    join: &datafusion::logical_expr::Join,
    input_constants: &[Constants],
    state: &SessionState,
) -> Result<Option<Rewritten>> {
    // A condition on the pair (`WHERE calibrate(t.p, m.model) > 0.5` pushed into the join)
    // becomes a filter of the other side, for an inner join; an outer join must have none.
    let condition = match &join.filter {
        None | Some(Expr::Literal(ScalarValue::Boolean(Some(true)), _)) => None,
        Some(c) if join.join_type == JoinType::Inner => Some(c),
        Some(_) => return Ok(None),
    };
    if !join.on.is_empty() {
        return Ok(None);
    }
    // (the side that may be a few rows, whether it is the right side)
    let candidates: &[(&LogicalPlan, bool)] = match join.join_type {
        JoinType::Inner => &[(&join.right, true), (&join.left, false)],
        JoinType::Left => &[(&join.right, true)],
        JoinType::Right => &[(&join.left, false)],
        _ => return Ok(None),
    };
    for &(side, is_right) in candidates {
        let Some(rows) = evaluate_small_side(side, state).await? else {
            continue;
        };
        let (big, big_constants) = if is_right {
            (&join.left, &input_constants[0])
        } else {
            (&join.right, &input_constants[1])
        };
        let project = |values: Vec<ScalarValue>| -> Result<Rewritten> {
            let mut row = project_constants(
                big,
                big_constants,
                side.schema(),
                values,
                is_right,
                &join.schema,
            )?;
            if let Some(condition) = condition {
                // The condition, with the row's values, filters the other side.
                let predicate = replace_columns(condition.clone(), &row.constants)?.data;
                let LogicalPlan::Projection(p) = row.plan else {
                    unreachable!("project_constants makes a projection")
                };
                let filtered = Filter::try_new(predicate, p.input)?;
                row.plan = LogicalPlan::Projection(Projection::try_new_with_schema(
                    p.expr,
                    Arc::new(LogicalPlan::Filter(filtered)),
                    p.schema,
                )?);
            }
            Ok(row)
        };
        return Ok(Some(match rows.len() {
            0 if join.join_type == JoinType::Inner => Rewritten::new(
                LogicalPlan::EmptyRelation(EmptyRelation {
                    produce_one_row: false,
                    schema: Arc::clone(&join.schema),
                }),
                Constants::new(),
                true,
            ),
            // The side an outer join keeps gets NULLs when the other side has no row.
            0 => project(
                side.schema()
                    .fields()
                    .iter()
                    .map(|f| ScalarValue::try_from(f.data_type()))
                    .collect::<Result<Vec<_>>>()?,
            )?,
            1 => project(rows.into_iter().next().expect("one row"))?,
            _ => {
                let holds_models = rows[0].iter().any(|v| v.data_type().is_nested());
                let branches = if holds_models && is_table_read(big) {
                    Some(
                        rows.iter()
                            .cloned()
                            .map(project)
                            .collect::<Result<Vec<_>>>()?,
                    )
                } else {
                    None
                };
                // The join itself, over the rows already evaluated.
                let values = LogicalPlan::Values(datafusion::logical_expr::Values {
                    schema: Arc::clone(side.schema()),
                    values: rows
                        .into_iter()
                        .map(|row| row.into_iter().map(|v| Expr::Literal(v, None)).collect())
                        .collect(),
                });
                let mut join = join.clone();
                if is_right {
                    join.right = Arc::new(values);
                } else {
                    join.left = Arc::new(values);
                }
                let plan = LogicalPlan::Join(join);
                let constants = output_constants(&plan, input_constants);
                Rewritten {
                    branches,
                    ..Rewritten::new(plan, constants, true)
                }
            }
        }));
    }
    Ok(None)
}

/// `big` with the columns of `small_schema` added as the literals `values`, in the order and
/// under the names of the join's schema.
fn project_constants(
    big: &Arc<LogicalPlan>,
    big_constants: &Constants,
    small_schema: &DFSchemaRef,
    values: Vec<ScalarValue>,
    small_is_right: bool,
    join_schema: &DFSchemaRef,
) -> Result<Rewritten> {
    let big_columns = big.schema().columns().into_iter().map(Expr::Column);
    let literals: Vec<Expr> = values
        .into_iter()
        .zip(small_schema.iter())
        .map(|(v, (q, f))| Expr::Literal(v, None).alias_qualified(q.cloned(), f.name()))
        .collect();
    let exprs: Vec<Expr> = if small_is_right {
        big_columns.chain(literals.iter().cloned()).collect()
    } else {
        literals.iter().cloned().chain(big_columns).collect()
    };
    let mut constants = big_constants.clone();
    for ((q, f), e) in small_schema.iter().zip(&literals) {
        constants.insert(Column::new(q.cloned(), f.name()), unalias(e));
    }
    let projection =
        Projection::try_new_with_schema(exprs, Arc::clone(big), Arc::clone(join_schema))?;
    Ok(Rewritten::new(
        LogicalPlan::Projection(projection),
        constants,
        true,
    ))
}

/// The rows of `side` when it has at most [`MAX_SIDE_ROWS`] and that is cheap to find out:
/// it cannot have more (an aggregate without `GROUP BY`, a `LIMIT`, a few `VALUES`), or it
/// reads a table and a `LIMIT` above it says so. `None` when it has more or was not evaluated.
async fn evaluate_small_side(
    side: &LogicalPlan,
    state: &SessionState,
) -> Result<Option<Vec<Vec<ScalarValue>>>> {
    let probe = if side.max_rows().is_some_and(|n| n <= MAX_SIDE_ROWS) {
        side.clone()
    } else if is_table_read(side) {
        LogicalPlanBuilder::from(side.clone())
            .limit(0, Some(MAX_SIDE_ROWS + 1))?
            .build()?
    } else {
        return Ok(None);
    };
    // Planned as it is: `side` is optimised already, and a `LIMIT` above a scan stops it.
    let physical = state
        .query_planner()
        .create_physical_plan(&probe, state)
        .await?;
    let batches = collect(physical, state.task_ctx()).await?;
    if batches.iter().map(|b| b.num_rows()).sum::<usize>() > MAX_SIDE_ROWS {
        return Ok(None);
    }
    let mut rows = Vec::new();
    for batch in &batches {
        for row in 0..batch.num_rows() {
            rows.push(
                batch
                    .columns()
                    .iter()
                    .map(|c| ScalarValue::try_from_array(c, row))
                    .collect::<Result<Vec<_>>>()?,
            );
        }
    }
    Ok(Some(rows))
}

/// Whether `plan` reads a table (or literal rows) through nodes that keep reading cheap when
/// a `LIMIT 2` is put above them.
fn is_table_read(plan: &LogicalPlan) -> bool {
    match plan {
        LogicalPlan::TableScan(_) | LogicalPlan::Values(_) | LogicalPlan::EmptyRelation(_) => true,
        LogicalPlan::Projection(_)
        | LogicalPlan::Filter(_)
        | LogicalPlan::SubqueryAlias(_)
        | LogicalPlan::Limit(_)
        | LogicalPlan::Repartition(_) => plan.inputs().into_iter().all(is_table_read),
        LogicalPlan::Sort(sort) => sort.fetch.is_some() && is_table_read(&sort.input),
        _ => false,
    }
}

/// `expr` without its alias.
fn unalias(expr: &Expr) -> Expr {
    match expr {
        Expr::Alias(a) => a.expr.as_ref().clone(),
        e => e.clone(),
    }
}

/// `expr` with the constant columns replaced by their literals; whether any was.
fn replace_columns(expr: Expr, constants: &Constants) -> Result<Transformed<Expr>> {
    if constants.is_empty() {
        return Ok(Transformed::no(expr));
    }
    expr.transform_up(|e| match &e {
        Expr::Column(c) => match constants.get(c) {
            Some(literal) => Ok(Transformed::yes(literal.clone())),
            None => Ok(Transformed::no(e)),
        },
        _ => Ok(Transformed::no(e)),
    })
}

/// `expr` with its constants replaced, under the name `schema`'s field `i` gives it.
fn replace_keeping_name(
    expr: Expr,
    constants: &Constants,
    schema: &DFSchemaRef,
    i: usize,
) -> Result<Transformed<Expr>> {
    let named = matches!(expr, Expr::Alias(_));
    let t = replace_columns(expr, constants)?;
    if !t.transformed || named {
        return Ok(t);
    }
    let (q, f) = schema.qualified_field(i);
    Ok(Transformed::yes(
        t.data.alias_qualified(q.cloned(), f.name()),
    ))
}

/// Substitutes the inputs' constants into the expressions of the nodes that compute with
/// them, keeping every output name and the node's schema.
fn substitute(plan: LogicalPlan, input_constants: &[Constants]) -> Result<(LogicalPlan, bool)> {
    let Some(constants) = input_constants.first().filter(|c| !c.is_empty()) else {
        return Ok((plan, false));
    };
    Ok(match plan {
        LogicalPlan::Projection(p) => {
            let mut changed = false;
            let mut exprs = Vec::with_capacity(p.expr.len());
            for (i, e) in p.expr.into_iter().enumerate() {
                let t = replace_keeping_name(e, constants, &p.schema, i)?;
                changed |= t.transformed;
                exprs.push(t.data);
            }
            let projection = Projection::try_new_with_schema(exprs, p.input, p.schema)?;
            (LogicalPlan::Projection(projection), changed)
        }
        LogicalPlan::Aggregate(a) => {
            let groups = a.group_expr.len();
            let mut changed = false;
            let mut group_expr = Vec::with_capacity(groups);
            for (i, e) in a.group_expr.into_iter().enumerate() {
                // A grouping set's output names come from its parts: leave it as it is.
                if matches!(e, Expr::GroupingSet(_)) {
                    group_expr.push(e);
                    continue;
                }
                let t = replace_keeping_name(e, constants, &a.schema, i)?;
                changed |= t.transformed;
                group_expr.push(t.data);
            }
            let has_sets = group_expr.iter().any(|e| matches!(e, Expr::GroupingSet(_)));
            let mut aggr_expr = Vec::with_capacity(a.aggr_expr.len());
            for (j, e) in a.aggr_expr.into_iter().enumerate() {
                if has_sets {
                    aggr_expr.push(e);
                    continue;
                }
                let t = replace_keeping_name(e, constants, &a.schema, groups + j)?;
                changed |= t.transformed;
                aggr_expr.push(t.data);
            }
            let aggregate =
                Aggregate::try_new_with_schema(a.input, group_expr, aggr_expr, a.schema)?;
            (LogicalPlan::Aggregate(aggregate), changed)
        }
        LogicalPlan::Filter(f) => {
            let t = replace_columns(f.predicate, constants)?;
            let filter = Filter::try_new(t.data, f.input)?;
            (LogicalPlan::Filter(filter), t.transformed)
        }
        LogicalPlan::Sort(s) => {
            let mut changed = false;
            let mut exprs = Vec::with_capacity(s.expr.len());
            for mut e in s.expr {
                let t = replace_columns(e.expr, constants)?;
                changed |= t.transformed;
                e.expr = t.data;
                exprs.push(e);
            }
            let sort = Sort {
                expr: exprs,
                input: s.input,
                fetch: s.fetch,
            };
            (LogicalPlan::Sort(sort), changed)
        }
        other => (other, false),
    })
}

/// The constant columns of `plan`'s output, given its inputs'.
fn output_constants(plan: &LogicalPlan, input_constants: &[Constants]) -> Constants {
    let pass = |k: usize| input_constants.get(k).cloned().unwrap_or_default();
    match plan {
        LogicalPlan::Projection(p) => p
            .expr
            .iter()
            .enumerate()
            .filter_map(|(i, e)| {
                let e = unalias(e);
                matches!(e, Expr::Literal(..)).then(|| {
                    let (q, f) = p.schema.qualified_field(i);
                    (Column::new(q.cloned(), f.name()), e)
                })
            })
            .collect(),
        LogicalPlan::SubqueryAlias(a) => {
            let inner = pass(0);
            if inner.is_empty() {
                return inner;
            }
            let input_schema = a.input.schema();
            (0..input_schema.fields().len())
                .filter_map(|i| {
                    let (q, f) = input_schema.qualified_field(i);
                    let literal = inner.get(&Column::new(q.cloned(), f.name()))?;
                    let (q, f) = a.schema.qualified_field(i);
                    Some((Column::new(q.cloned(), f.name()), literal.clone()))
                })
                .collect()
        }
        // Nodes whose output holds their input's columns under the same names.
        LogicalPlan::Filter(_)
        | LogicalPlan::Sort(_)
        | LogicalPlan::Limit(_)
        | LogicalPlan::Repartition(_)
        | LogicalPlan::Window(_) => pass(0),
        // A join keeps the values of the sides whose every output row comes from a row of
        // theirs; an outer join's other side may be NULL instead.
        LogicalPlan::Join(j) => match j.join_type {
            JoinType::Inner => {
                let mut both = pass(0);
                both.extend(pass(1));
                both
            }
            JoinType::Left | JoinType::LeftSemi | JoinType::LeftAnti | JoinType::LeftMark => {
                pass(0)
            }
            JoinType::Right | JoinType::RightSemi | JoinType::RightAnti | JoinType::RightMark => {
                pass(1)
            }
            JoinType::Full => Constants::new(),
        },
        _ => Constants::new(),
    }
}

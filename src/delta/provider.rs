//! The table a session sees for a Delta table: delta-rs's scan over one version, found again
//! for each statement unless the table was opened at a fixed version, with its nested columns
//! typed as calibsql's own Parquet reads type them.
//!
//! delta-rs's own provider reads the version it was built on. A `--table` or a `CREATE
//! EXTERNAL TABLE … STORED AS DELTA` should follow the table as other writers (or this
//! session's `INSERT`s) commit to it, so before each scan and each insert this provider brings
//! its snapshot up to date (reading only the log entries since the last one) and, when the
//! version moved, builds delta-rs's provider anew over it.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::{plan_err, Result};
use datafusion::execution::session_state::SessionState;
use datafusion::logical_expr::dml::InsertOp;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown, TableType};
use datafusion::physical_expr::expressions::{cast, Column};
use datafusion::physical_expr::projection::ProjectionExpr;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::ExecutionPlan;
use deltalake::DeltaTable;

use super::{explain, At};

/// A Delta table, as a DataFusion table.
pub struct DeltaTableProvider {
    /// The location as the user gave it (for messages, and for the server's path checks).
    location: String,
    /// The version it reads: the latest (followed), or a fixed one.
    at: At,
    /// The columns, as of opening: data columns, then partition columns.
    schema: SchemaRef,
    current: Mutex<Loaded>,
}

/// The table as last loaded and delta-rs's provider over that version.
#[derive(Clone)]
struct Loaded {
    table: DeltaTable,
    version: u64,
    provider: Arc<dyn TableProvider>,
}

impl std::fmt::Debug for DeltaTableProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeltaTableProvider")
            .field("location", &self.location)
            .field("at", &self.at)
            .field("version", &self.version())
            .finish_non_exhaustive()
    }
}

impl DeltaTableProvider {
    /// Opens the Delta table at `location` at version `at` (see [`super::open`]).
    pub async fn open(session: &dyn Session, location: &str, at: At) -> Result<Self> {
        let table = super::open(session, location, &at).await?;
        let loaded = load(session, location, table).await?;
        Ok(DeltaTableProvider {
            location: location.to_string(),
            at,
            schema: as_calibsql_reads(&loaded.provider.schema()),
            current: Mutex::new(loaded),
        })
    }

    /// The location the table was opened from.
    pub fn location(&self) -> &str {
        &self.location
    }

    /// The version last read.
    pub fn version(&self) -> u64 {
        self.loaded().version
    }

    fn loaded(&self) -> Loaded {
        self.current
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// delta-rs's provider over the version this statement reads: the latest one, unless the
    /// table was opened at a fixed version.
    async fn provider(&self, session: &dyn Session) -> Result<Arc<dyn TableProvider>> {
        let loaded = self.loaded();
        if self.at != At::Latest {
            return Ok(loaded.provider);
        }
        let mut table = loaded.table.clone();
        table
            .update_incremental(None)
            .await
            .map_err(|e| explain(&self.location, e))?;
        let version = table.version().unwrap_or(loaded.version);
        if version == loaded.version {
            return Ok(loaded.provider);
        }
        let newer = load(session, &self.location, table).await?;
        if as_calibsql_reads(&newer.provider.schema()).fields() != self.schema.fields() {
            return plan_err!(
                "the columns of Delta table {} changed at version {version} (now {}); \
                 open it again to read them",
                self.location,
                column_list(&newer.provider.schema())
            );
        }
        let provider = Arc::clone(&newer.provider);
        *self
            .current
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = newer;
        Ok(provider)
    }
}

/// delta-rs's provider over `table`'s loaded version, configured by the session (Parquet
/// pushdown and the like). A table whose features delta-rs cannot read fails here, by name.
async fn load(session: &dyn Session, location: &str, table: DeltaTable) -> Result<Loaded> {
    let version = table.version().unwrap_or(0);
    let builder = table.table_provider();
    let builder = match session.as_any().downcast_ref::<SessionState>() {
        Some(state) => builder.with_session(Arc::new(state.clone())),
        None => builder,
    };
    let provider = builder
        .await
        .map_err(|e| datafusion::common::plan_datafusion_err!("Delta table {location}: {e}"))?;
    Ok(Loaded {
        table,
        version,
        provider,
    })
}

/// `schema` with the types calibsql's functions and its own Parquet reads use: text nested in
/// structs and lists as `Utf8` (delta-rs reads it as `Utf8View`) and list items named `item`
/// (delta-rs names them `element`). A `*_state` struct or a model read back from a Delta table
/// then has exactly the type its `_merge` function or `calibrate` takes. Top-level columns keep
/// their types (top-level text is `Utf8View` in Parquet reads too).
fn as_calibsql_reads(schema: &SchemaRef) -> SchemaRef {
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| {
            let t = match f.data_type() {
                nested @ (DataType::Struct(_) | DataType::List(_) | DataType::LargeList(_)) => {
                    nested_as_calibsql_reads(nested)
                }
                other => other.clone(),
            };
            Field::new(f.name(), t, f.is_nullable()).with_metadata(f.metadata().clone())
        })
        .collect();
    Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
}

pub(super) fn nested_as_calibsql_reads(t: &DataType) -> DataType {
    match t {
        DataType::Utf8View | DataType::LargeUtf8 => DataType::Utf8,
        DataType::BinaryView | DataType::LargeBinary => DataType::Binary,
        DataType::List(item) | DataType::LargeList(item) => {
            DataType::List(Arc::new(Field::new_list_field(
                nested_as_calibsql_reads(item.data_type()),
                item.is_nullable(),
            )))
        }
        DataType::Struct(fields) => DataType::Struct(
            fields
                .iter()
                .map(|f| {
                    Field::new(
                        f.name(),
                        nested_as_calibsql_reads(f.data_type()),
                        f.is_nullable(),
                    )
                })
                .collect(),
        ),
        other => other.clone(),
    }
}

/// `plan`'s rows with the columns of `target` (found by name, in `target`'s order), cast where
/// the types differ. A missing or extra column is an error naming the table's columns.
pub(super) fn conform(
    plan: Arc<dyn ExecutionPlan>,
    target: &Schema,
    location: &str,
) -> Result<Arc<dyn ExecutionPlan>> {
    let input = plan.schema();
    if input.fields() == target.fields() {
        return Ok(plan);
    }
    let mut exprs: Vec<ProjectionExpr> = Vec::with_capacity(target.fields().len());
    for field in target.fields() {
        let Ok(index) = input.index_of(field.name()) else {
            return plan_err!(
                "Delta table {location} has the columns ({}); the rows given have ({})",
                column_list(&Arc::new(target.clone())),
                column_list(&input)
            );
        };
        let column: Arc<dyn PhysicalExpr> = Arc::new(Column::new(field.name(), index));
        let expr = if input.field(index).data_type() == field.data_type() {
            column
        } else {
            cast(column, &input, field.data_type().clone())?
        };
        exprs.push(ProjectionExpr {
            expr,
            alias: field.name().clone(),
        });
    }
    if input.fields().len() != target.fields().len() {
        return plan_err!(
            "Delta table {location} has the columns ({}); the rows given have ({})",
            column_list(&Arc::new(target.clone())),
            column_list(&input)
        );
    }
    Ok(Arc::new(ProjectionExec::try_new(exprs, plan)?))
}

fn column_list(schema: &SchemaRef) -> String {
    let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    names.join(", ")
}

#[async_trait]
impl TableProvider for DeltaTableProvider {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    async fn scan(
        &self,
        session: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let plan = self
            .provider(session)
            .await?
            .scan(session, projection, filters, limit)
            .await?;
        // The scan's columns, with the types this table shows (nested text and lists as
        // calibsql's own Parquet reads give them).
        let shown = plan
            .schema()
            .fields()
            .iter()
            .map(|f| match self.schema.field_with_name(f.name()) {
                Ok(shown) => Arc::new(shown.clone()),
                Err(_) => Arc::clone(f),
            })
            .collect::<Vec<_>>();
        conform(plan, &Schema::new(shown), &self.location)
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        self.loaded().provider.supports_filters_pushdown(filters)
    }

    /// Appends (`INSERT INTO`) or replaces (`INSERT OVERWRITE`) the table's rows in one Delta
    /// commit, on top of its latest version; a concurrent writer's commit in between is
    /// reconciled by delta-rs's conflict checks and retried.
    async fn insert_into(
        &self,
        session: &dyn Session,
        input: Arc<dyn ExecutionPlan>,
        insert_op: InsertOp,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if self.at != At::Latest {
            return plan_err!(
                "Delta table {} was opened at its {}, which cannot be written; \
                 write to the table itself",
                self.location,
                self.at
            );
        }
        if insert_op == InsertOp::Replace {
            return plan_err!(
                "Delta table {}: REPLACE INTO is not supported (INSERT INTO appends, \
                 INSERT OVERWRITE replaces every row)",
                self.location
            );
        }
        super::check_safe_commits(&self.location)?;
        let provider = self.provider(session).await?;
        // delta-rs's writer takes the columns as its own scan shows them.
        let input = conform(input, &provider.schema(), &self.location)?;
        provider.insert_into(session, input, insert_op).await
    }
}

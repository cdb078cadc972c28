//! One DataFusion session per connection, copied from one template.
//!
//! The template is the CLI's session (`calibsql::build_context`: every calibsql function,
//! the settings, the query planner, S3), or a client of the cluster at `--remote`, with the
//! `--table`s registered once (their schemas inferred once). A connection's session is a copy
//! of its state with a catalog of its own: the `--table`s (the same providers, shared
//! read-only), `pg_catalog` for psql, JDBC and BI tools, and paths in FROM through the policy
//! ([`PathCheckedUrlTables`]). So a `SET` or a view in one connection is invisible to
//! another, while all share the template's runtime: its memory pool (`--memory-limit` is
//! the server's), disk manager and object stores.

use std::collections::HashMap;
use std::sync::Arc;

use anyhow::Context;
use datafusion::arrow::datatypes::{DataType, Field};
use datafusion::catalog::{
    CatalogProvider, CatalogProviderList, MemoryCatalogProvider, MemoryCatalogProviderList,
    MemorySchemaProvider, SchemaProvider, TableProvider,
};
use datafusion::common::ScalarValue;
use datafusion::datasource::MemTable;
use datafusion::execution::session_state::{SessionState, SessionStateBuilder};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, TypeSignature,
    Volatility,
};
use datafusion::prelude::SessionContext;
use datafusion_postgres::datafusion_pg_catalog::pg_catalog::context::EmptyContextProvider;
use datafusion_postgres::datafusion_pg_catalog::pg_catalog::{
    setup_pg_catalog, PgCatalogStaticTables,
};

use super::policy::{PathCheckedUrlTables, Policy};

/// The name clients connect to (`dbname=calibsql`), the catalog of their tables.
pub const DATABASE: &str = "calibsql";
/// The schema of the `--table`s.
const SCHEMA: &str = "public";

/// What every connection's session is made from.
pub struct Sessions {
    template: SessionState,
    tables: Vec<(String, Arc<dyn TableProvider>)>,
    policy: Arc<Policy>,
    /// The `pg_catalog` tables whose array columns are arrays here ([`typed_catalog_tables`]),
    /// made once and shared (they never change).
    catalog_tables: Arc<HashMap<String, Arc<dyn TableProvider>>>,
}

impl Sessions {
    /// `ctx` (with the `--table`s registered in its default schema, named `tables`) as the
    /// template; the `--table`s become the policy's own tables.
    pub fn new(
        ctx: &SessionContext,
        tables: &[String],
        mut policy: Policy,
    ) -> anyhow::Result<Self> {
        let mut providers = Vec::new();
        let catalog_name = ctx
            .state()
            .config()
            .options()
            .catalog
            .default_catalog
            .clone();
        let schema_name = ctx
            .state()
            .config()
            .options()
            .catalog
            .default_schema
            .clone();
        let schema = ctx
            .catalog(&catalog_name)
            .and_then(|c| c.schema(&schema_name))
            .context("the session has no default schema")?;
        for name in tables {
            // Names are read as SQL reads them (unquoted: lower case).
            let key = name.to_lowercase();
            let table = futures::executor::block_on(schema.table(&key))?
                .with_context(|| format!("--table {name} was not registered"))?;
            policy.add_own_table(&table);
            providers.push((key, table));
        }
        let mut template = ctx.state();
        let options = template.config_mut().options_mut();
        options.catalog.default_catalog = DATABASE.to_string();
        options.catalog.default_schema = SCHEMA.to_string();
        // The template's catalogs are replaced in each copy: none is created here.
        options.catalog.create_default_catalog_and_schema = false;
        Ok(Sessions {
            template,
            tables: providers,
            policy: Arc::new(policy),
            catalog_tables: Arc::new(typed_catalog_tables()?),
        })
    }

    pub fn policy(&self) -> &Arc<Policy> {
        &self.policy
    }

    /// A new session for one connection (`read_only`: clients may not write, what
    /// `transaction_read_only` answers).
    pub fn connect(&self, read_only: bool) -> anyhow::Result<SessionContext> {
        let schema = MemorySchemaProvider::new();
        for (name, table) in &self.tables {
            schema.register_table(name.clone(), Arc::clone(table))?;
        }
        let catalog = MemoryCatalogProvider::new();
        catalog.register_schema(SCHEMA, Arc::new(schema))?;
        let catalogs = MemoryCatalogProviderList::new();
        catalogs.register_catalog(DATABASE.to_string(), Arc::new(catalog));
        let mut state = SessionStateBuilder::new_from_existing(self.template.clone())
            .with_catalog_list(Arc::new(catalogs))
            .build();
        // `delta_scan('PATH')` reads PATH's log while it is planned, before the plan's check.
        let policy = Arc::clone(&self.policy);
        state
            .config_mut()
            .set_extension(Arc::new(calibsql::delta::ReadableLocations(Arc::new(
                move |location: &str| policy.check_read(location),
            ))));
        // Paths in FROM (Delta tables through their log), only under an --allow-path prefix.
        let policy = Arc::clone(&self.policy);
        let ctx =
            calibsql::delta::with_url_tables(SessionContext::new_with_state(state), |tables| {
                Arc::new(PathCheckedUrlTables {
                    inner: tables,
                    policy,
                })
            });
        // information_schema comes with the config; pg_catalog is what clients' catalog
        // queries (psql \d, JDBC getTables, BI tools) read.
        setup_pg_catalog(&ctx, DATABASE, EmptyContextProvider)
            .map_err(|e| anyhow::anyhow!("cannot set up pg_catalog: {e}"))?;
        let catalog = ctx
            .catalog(DATABASE)
            .context("the session has no catalog")?;
        let pg_catalog = catalog
            .schema("pg_catalog")
            .context("pg_catalog was not set up")?;
        catalog.register_schema(
            "pg_catalog",
            Arc::new(TypedCatalog {
                inner: pg_catalog,
                tables: Arc::clone(&self.catalog_tables),
            }),
        )?;
        for stub in CatalogStub::all() {
            ctx.register_udf(ScalarUDF::new_from_impl(stub));
        }
        ctx.register_udf(ScalarUDF::new_from_impl(JsonBuildObject::new()));
        ctx.register_udf(ScalarUDF::new_from_impl(LikeEscape::new()));
        ctx.register_udf(ScalarUDF::new_from_impl(CurrentSetting::new(read_only)));
        Ok(ctx)
    }
}

/// The array columns of the `pg_catalog` tables that clients `unnest` (SQLAlchemy's
/// inspector: an index's and a constraint's columns, `unnest(indkey)`), with their element
/// type: `int2vector` and `int2[]` as 16-bit integers, `oidvector` and `oid[]` as oids
/// (32-bit integers, as the other oid columns here). datafusion-postgres keeps them as
/// their text (`1 2`, `[1, 2]`), which `unnest` refuses.
const ARRAY_COLUMNS: [(&str, &[(&str, DataType)]); 2] = [
    (
        "pg_index",
        &[
            ("indkey", DataType::Int16),
            ("indcollation", DataType::Int32),
            ("indclass", DataType::Int32),
            ("indoption", DataType::Int16),
        ],
    ),
    (
        "pg_constraint",
        &[
            ("conkey", DataType::Int16),
            ("confkey", DataType::Int16),
            ("conpfeqop", DataType::Int32),
            ("conppeqop", DataType::Int32),
            ("conffeqop", DataType::Int32),
            ("conexclop", DataType::Int32),
            ("confdelsetcols", DataType::Int16),
        ],
    ),
];

/// The integers of an array's text: `1 2` (an `int2vector`), `[1, 2]` or `{1,2}`.
fn array_text(text: &str) -> Option<Vec<i64>> {
    let inner = text.trim();
    let inner = inner
        .strip_prefix('[')
        .and_then(|t| t.strip_suffix(']'))
        .or_else(|| inner.strip_prefix('{').and_then(|t| t.strip_suffix('}')))
        .unwrap_or(inner);
    inner
        .split([',', ' '])
        .filter(|part| !part.is_empty())
        .map(|part| part.parse().ok())
        .collect()
}

/// The tables of [`ARRAY_COLUMNS`], from datafusion-postgres' own, with those columns as
/// lists of their element type.
fn typed_catalog_tables() -> anyhow::Result<HashMap<String, Arc<dyn TableProvider>>> {
    use datafusion::arrow::array::{ArrayRef, AsArray, Int64Builder, ListBuilder};
    use datafusion::arrow::datatypes::Schema;
    use datafusion::arrow::record_batch::RecordBatch;
    let statics = PgCatalogStaticTables::try_new()
        .map_err(|e| anyhow::anyhow!("cannot read pg_catalog's tables: {e}"))?;
    let mut tables = HashMap::new();
    for (name, columns) in ARRAY_COLUMNS {
        let table = match name {
            "pg_index" => &statics.pg_index,
            _ => &statics.pg_constraint,
        };
        let schema = table.schema();
        let typed = |field: &Field| {
            columns
                .iter()
                .find(|(c, _)| c == field.name())
                .map(|(_, element)| element)
        };
        let fields: Vec<Field> = schema
            .fields()
            .iter()
            .map(|field| match typed(field) {
                Some(element) => Field::new_list(
                    field.name(),
                    Field::new_list_field(element.clone(), true),
                    true,
                ),
                None => field.as_ref().clone(),
            })
            .collect();
        let typed_schema = Arc::new(Schema::new(fields));
        let mut batches = Vec::new();
        for batch in table.data() {
            let mut arrays: Vec<ArrayRef> = Vec::new();
            for (i, field) in schema.fields().iter().enumerate() {
                let column = batch.column(i);
                if typed(field).is_none() {
                    arrays.push(Arc::clone(column));
                    continue;
                }
                let text = datafusion::arrow::compute::cast(column, &DataType::Utf8)?;
                let mut list = ListBuilder::new(Int64Builder::new());
                for value in text.as_string::<i32>() {
                    match value {
                        None => list.append_null(),
                        Some(value) => {
                            let numbers = array_text(value).with_context(|| {
                                format!("pg_catalog.{name}.{}: not an array: {value}", field.name())
                            })?;
                            list.values().append_slice(&numbers);
                            list.append(true);
                        }
                    }
                }
                let list: ArrayRef = Arc::new(list.finish());
                arrays.push(datafusion::arrow::compute::cast(
                    &list,
                    typed_schema.field(i).data_type(),
                )?);
            }
            batches.push(RecordBatch::try_new(Arc::clone(&typed_schema), arrays)?);
        }
        let memory = MemTable::try_new(typed_schema, vec![batches])?;
        tables.insert(name.to_string(), Arc::new(memory) as Arc<dyn TableProvider>);
    }
    Ok(tables)
}

/// datafusion-postgres' `pg_catalog` with the tables of [`typed_catalog_tables`] in place
/// of its own.
#[derive(Debug)]
struct TypedCatalog {
    inner: Arc<dyn SchemaProvider>,
    tables: Arc<HashMap<String, Arc<dyn TableProvider>>>,
}

#[async_trait::async_trait]
impl SchemaProvider for TypedCatalog {
    fn table_names(&self) -> Vec<String> {
        self.inner.table_names()
    }

    async fn table(
        &self,
        name: &str,
    ) -> datafusion::common::Result<Option<Arc<dyn TableProvider>>> {
        let name = name.to_ascii_lowercase();
        if let Some(table) = self.tables.get(&name) {
            return Ok(Some(Arc::clone(table)));
        }
        let Some(table) = self.inner.table(&name).await? else {
            return Ok(None);
        };
        let missing = missing_columns(&name);
        if missing.is_empty() {
            return Ok(Some(table));
        }
        with_null_columns(&name, table, missing).map(Some)
    }

    fn table_exist(&self, name: &str) -> bool {
        self.inner.table_exist(name)
    }
}

/// Columns of PostgreSQL's `pg_catalog` tables that datafusion-postgres' lack and clients
/// read, NULL in every row: `pg_class.reloptions` (a relation's storage options, none here;
/// SQLAlchemy's `get_indexes` reads it).
fn missing_columns(table: &str) -> Vec<Field> {
    match table {
        "pg_class" => vec![Field::new_list(
            "reloptions",
            Field::new_list_field(DataType::Utf8, true),
            true,
        )],
        _ => vec![],
    }
}

/// `table` with `columns` added, NULL in every row (a view of it).
fn with_null_columns(
    name: &str,
    table: Arc<dyn TableProvider>,
    columns: Vec<Field>,
) -> datafusion::common::Result<Arc<dyn TableProvider>> {
    use datafusion::logical_expr::{cast, col, lit, LogicalPlanBuilder};
    let mut projection: Vec<datafusion::prelude::Expr> = table
        .schema()
        .fields()
        .iter()
        .map(|f| col(datafusion::common::Column::new_unqualified(f.name())))
        .collect();
    for field in columns {
        projection
            .push(cast(lit(ScalarValue::Null), field.data_type().clone()).alias(field.name()));
    }
    let plan = LogicalPlanBuilder::scan(
        name,
        datafusion::datasource::provider_as_source(table),
        None,
    )?
    .project(projection)?
    .build()?;
    Ok(Arc::new(datafusion::catalog::view::ViewTable::new(
        plan, None,
    )))
}

/// A Postgres function with one answer here: `version()` ([`postgres_version`]), and the
/// catalog functions SQLAlchemy's inspector calls on objects calibsql does not have
/// (sequences, collations, identity columns), answering what Postgres answers for a table
/// without them.
#[derive(Debug, PartialEq, Eq, Hash)]
struct CatalogStub {
    name: &'static str,
    signature: Signature,
    answer: ScalarValue,
}

impl CatalogStub {
    fn all() -> Vec<CatalogStub> {
        let stub = |name, arity, answer| CatalogStub {
            name,
            signature: Signature::any(arity, Volatility::Stable),
            answer,
        };
        vec![
            CatalogStub {
                name: "version",
                signature: Signature::nullary(Volatility::Immutable),
                answer: ScalarValue::Utf8(Some(postgres_version())),
            },
            // The sequence behind a serial column: none.
            stub("pg_get_serial_sequence", 2, ScalarValue::Utf8(None)),
            // The definition of an index, or of one of its columns: calibsql's tables have
            // no index, and the catalog keeps no definition of PostgreSQL's own.
            CatalogStub {
                name: "pg_get_indexdef",
                signature: Signature::one_of(
                    vec![TypeSignature::Any(1), TypeSignature::Any(3)],
                    Volatility::Stable,
                ),
                answer: ScalarValue::Utf8(None),
            },
            // Whether a collation is on the search path: the default one is.
            stub(
                "pg_collation_is_visible",
                1,
                ScalarValue::Boolean(Some(true)),
            ),
        ]
    }
}

impl ScalarUDFImpl for CatalogStub {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> datafusion::common::Result<DataType> {
        Ok(self.answer.data_type())
    }

    fn invoke_with_args(
        &self,
        _args: ScalarFunctionArgs,
    ) -> datafusion::common::Result<ColumnarValue> {
        Ok(ColumnarValue::Scalar(self.answer.clone()))
    }
}

/// Postgres' `json_build_object(key, value, …)`, which SQLAlchemy's inspector uses to read
/// identity and collation details: one JSON object a row, as text; numbers and booleans as
/// JSON's, NULL as `null`, anything else as its text.
#[derive(Debug, PartialEq, Eq, Hash)]
struct JsonBuildObject {
    signature: Signature,
}

impl JsonBuildObject {
    fn new() -> Self {
        JsonBuildObject {
            signature: Signature::variadic_any(Volatility::Immutable),
        }
    }
}

fn json_value(value: &ScalarValue) -> serde_json::Value {
    use serde_json::Value;
    if value.is_null() {
        return Value::Null;
    }
    match value {
        ScalarValue::Boolean(Some(b)) => Value::Bool(*b),
        v if v.data_type().is_integer() => v
            .cast_to(&DataType::Int64)
            .ok()
            .and_then(|i| match i {
                ScalarValue::Int64(Some(i)) => Some(Value::from(i)),
                _ => None,
            })
            .unwrap_or_else(|| Value::String(v.to_string())),
        v if v.data_type().is_floating() => match v.cast_to(&DataType::Float64) {
            Ok(ScalarValue::Float64(Some(f))) => serde_json::Number::from_f64(f)
                .map(Value::Number)
                .unwrap_or(Value::Null),
            _ => Value::String(v.to_string()),
        },
        v => Value::String(v.to_string()),
    }
}

impl ScalarUDFImpl for JsonBuildObject {
    fn name(&self) -> &str {
        "json_build_object"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> datafusion::common::Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(
        &self,
        args: ScalarFunctionArgs,
    ) -> datafusion::common::Result<ColumnarValue> {
        if !args.args.len().is_multiple_of(2) {
            return datafusion::common::exec_err!(
                "json_build_object: argument list must have even number of elements, got {}",
                args.args.len()
            );
        }
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let mut out = datafusion::arrow::array::StringBuilder::new();
        for row in 0..args.number_rows {
            let mut object = serde_json::Map::new();
            for pair in arrays.chunks(2) {
                let key = ScalarValue::try_from_array(&pair[0], row)?;
                if key.is_null() {
                    return datafusion::common::exec_err!(
                        "json_build_object: argument {} (a key) cannot be null",
                        object.len() * 2 + 1
                    );
                }
                let value = ScalarValue::try_from_array(&pair[1], row)?;
                object.insert(key.to_string(), json_value(&value));
            }
            out.append_value(serde_json::Value::Object(object).to_string());
        }
        Ok(ColumnarValue::Array(std::sync::Arc::new(out.finish())))
    }
}

/// Postgres' `like_escape(pattern, escape)`: `pattern`, whose escape character is `escape`
/// (one character, or none when empty), written with backslash escapes, the only ones
/// DataFusion's `LIKE` reads. The server rewrites `LIKE p ESCAPE 'c'` to `LIKE
/// like_escape(p, 'c')` (`super::catalog`).
#[derive(Debug, PartialEq, Eq, Hash)]
struct LikeEscape {
    signature: Signature,
}

impl LikeEscape {
    fn new() -> Self {
        LikeEscape {
            signature: Signature::string(2, Volatility::Immutable),
        }
    }
}

/// `pattern` with backslash escapes, where `escape` (when given) was its escape character.
fn backslash_escaped(pattern: &str, escape: Option<char>) -> Result<String, String> {
    let mut out = String::with_capacity(pattern.len() + 2);
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if Some(c) == escape {
            match chars.next() {
                Some(next) => {
                    out.push('\\');
                    out.push(next);
                }
                None => {
                    return Err(format!(
                        "like_escape: argument pattern must not end with the escape character \
                         '{c}', got '{pattern}'"
                    ))
                }
            }
        } else if c == '\\' {
            // A literal backslash when it is not the escape character.
            out.push_str("\\\\");
        } else {
            out.push(c);
        }
    }
    Ok(out)
}

impl ScalarUDFImpl for LikeEscape {
    fn name(&self) -> &str {
        "like_escape"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> datafusion::common::Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(
        &self,
        args: ScalarFunctionArgs,
    ) -> datafusion::common::Result<ColumnarValue> {
        use datafusion::arrow::array::{Array, AsArray, StringBuilder};
        let arrays = ColumnarValue::values_to_arrays(&args.args)?
            .iter()
            .map(|a| datafusion::arrow::compute::cast(a, &DataType::Utf8))
            .collect::<Result<Vec<_>, _>>()?;
        let (patterns, escapes) = (arrays[0].as_string::<i32>(), arrays[1].as_string::<i32>());
        let mut out = StringBuilder::new();
        for row in 0..args.number_rows {
            if patterns.is_null(row) || escapes.is_null(row) {
                out.append_null();
                continue;
            }
            let escape_text = escapes.value(row);
            let mut escape = escape_text.chars();
            let escape = match (escape.next(), escape.next()) {
                (first, None) => first,
                _ => {
                    return Err(calibsql::errors::Plain::error(format!(
                        "like_escape: argument escape must be empty or one character, got \
                         '{escape_text}'"
                    )))
                }
            };
            out.append_value(
                backslash_escaped(patterns.value(row), escape)
                    .map_err(calibsql::errors::Plain::error)?,
            );
        }
        let array: datafusion::arrow::array::ArrayRef = Arc::new(out.finish());
        Ok(
            if args
                .args
                .iter()
                .all(|a| matches!(a, ColumnarValue::Scalar(_)))
            {
                ColumnarValue::Scalar(ScalarValue::try_from_array(&array, 0)?)
            } else {
                ColumnarValue::Array(array)
            },
        )
    }
}

/// The value of a PostgreSQL setting that clients read (`SHOW name`, `current_setting(name)`)
/// and datafusion-postgres answers wrongly or not at all: SQLAlchemy asks for
/// `standard_conforming_strings` and `default_table_access_method`, psycopg and JDBC read the
/// server's release. `name` in lower case; its canonical name and value.
pub fn postgres_setting(name: &str, read_only: bool) -> Option<(&'static str, String)> {
    let on_off = |on: bool| if on { "on" } else { "off" }.to_string();
    Some(match name {
        "server_version" => (
            "server_version",
            format!(
                "{POSTGRES_VERSION} (calibsql {})",
                env!("CARGO_PKG_VERSION")
            ),
        ),
        "server_version_num" => {
            let (major, minor) = POSTGRES_VERSION
                .split_once('.')
                .unwrap_or((POSTGRES_VERSION, "0"));
            let number =
                major.parse::<u32>().unwrap_or(0) * 10_000 + minor.parse::<u32>().unwrap_or(0);
            ("server_version_num", number.to_string())
        }
        "standard_conforming_strings" => ("standard_conforming_strings", on_off(true)),
        "server_encoding" => ("server_encoding", "UTF8".to_string()),
        "integer_datetimes" => ("integer_datetimes", on_off(true)),
        "is_superuser" => ("is_superuser", on_off(false)),
        "default_transaction_read_only" => ("default_transaction_read_only", on_off(read_only)),
        "transaction_read_only" => ("transaction_read_only", on_off(read_only)),
        "max_identifier_length" => ("max_identifier_length", "63".to_string()),
        // The access method of tables that name none (PostgreSQL's default): SQLAlchemy
        // reports a table's own only when it differs.
        "default_table_access_method" => ("default_table_access_method", "heap".to_string()),
        _ => return None,
    })
}

/// Postgres' `current_setting(name [, missing_ok])`: a setting of [`postgres_setting`], or
/// of the session (`datafusion.…`, `calibsql.…`, as `SHOW` gives it); another name is an
/// error, or NULL when `missing_ok` is true.
#[derive(Debug, PartialEq, Eq, Hash)]
struct CurrentSetting {
    signature: Signature,
    read_only: bool,
}

impl CurrentSetting {
    fn new(read_only: bool) -> Self {
        CurrentSetting {
            signature: Signature::one_of(
                vec![
                    TypeSignature::Exact(vec![DataType::Utf8]),
                    TypeSignature::Exact(vec![DataType::Utf8, DataType::Boolean]),
                ],
                Volatility::Stable,
            ),
            read_only,
        }
    }
}

impl ScalarUDFImpl for CurrentSetting {
    fn name(&self) -> &str {
        "current_setting"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> datafusion::common::Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(
        &self,
        args: ScalarFunctionArgs,
    ) -> datafusion::common::Result<ColumnarValue> {
        use datafusion::arrow::array::{Array, AsArray, StringBuilder};
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let names = arrays[0].as_string::<i32>();
        let missing_ok = arrays.get(1).map(|a| a.as_boolean().clone());
        let session: HashMap<String, Option<String>> = args
            .config_options
            .entries()
            .into_iter()
            .map(|entry| (entry.key, entry.value))
            .collect();
        let mut out = StringBuilder::new();
        for row in 0..args.number_rows {
            if names.is_null(row) {
                out.append_null();
                continue;
            }
            let name = names.value(row).to_ascii_lowercase();
            if let Some((_, value)) = postgres_setting(&name, self.read_only) {
                out.append_value(value);
                continue;
            }
            match session.get(&name) {
                Some(value) => out.append_option(value.as_deref()),
                None if missing_ok
                    .as_ref()
                    .is_some_and(|ok| ok.is_valid(row) && ok.value(row)) =>
                {
                    out.append_null()
                }
                None => {
                    return Err(calibsql::errors::Plain::error(format!(
                        "current_setting: unrecognized configuration parameter \"{}\"",
                        names.value(row)
                    )))
                }
            }
        }
        let array: datafusion::arrow::array::ArrayRef = Arc::new(out.finish());
        Ok(
            if args
                .args
                .iter()
                .all(|a| matches!(a, ColumnarValue::Scalar(_)))
            {
                ColumnarValue::Scalar(ScalarValue::try_from_array(&array, 0)?)
            } else {
                ColumnarValue::Array(array)
            },
        )
    }
}

/// The PostgreSQL release whose protocol and catalog the server answers as: what
/// `version()` and `server_version` report first, since clients read the release from
/// them (SQLAlchemy's dialects parse `PostgreSQL <major>.<minor>` from `version()`).
pub const POSTGRES_VERSION: &str = "16.6";

/// `version()` over the Postgres wire: `PostgreSQL 16.6 (calibsql 0.1.0 on Apache DataFusion
/// 55.2.0, x86_64-linux)`, where DataFusion's own answers `Apache DataFusion 55.2.0, …`,
/// which PostgreSQL clients cannot parse.
fn postgres_version() -> String {
    format!(
        "PostgreSQL {POSTGRES_VERSION} (calibsql {} on Apache DataFusion {}, {}-{})",
        env!("CARGO_PKG_VERSION"),
        datafusion::DATAFUSION_VERSION,
        std::env::consts::ARCH,
        std::env::consts::OS
    )
}

#[cfg(test)]
mod tests {
    use super::{array_text, backslash_escaped};

    #[test]
    fn like_escape_writes_backslash_escapes() {
        assert_eq!(backslash_escaped("pg/_%", Some('/')).unwrap(), "pg\\_%");
        assert_eq!(backslash_escaped("a//b", Some('/')).unwrap(), "a\\/b");
        // A backslash that is not the escape character is a literal one.
        assert_eq!(backslash_escaped("a\\b", Some('/')).unwrap(), "a\\\\b");
        assert_eq!(backslash_escaped("a\\_", None).unwrap(), "a\\\\_");
        assert_eq!(
            backslash_escaped("ab/", Some('/')).unwrap_err(),
            "like_escape: argument pattern must not end with the escape character '/', got 'ab/'"
        );
    }

    #[test]
    fn catalog_arrays_are_read_from_their_text() {
        assert_eq!(array_text("1 2"), Some(vec![1, 2]));
        assert_eq!(array_text("[2, 20, 3]"), Some(vec![2, 20, 3]));
        assert_eq!(array_text("{1,-3}"), Some(vec![1, -3]));
        assert_eq!(array_text(""), Some(vec![]));
        assert_eq!(array_text("1 x"), None);
    }
}

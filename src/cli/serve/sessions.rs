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

use std::sync::Arc;

use anyhow::Context;
use datafusion::arrow::datatypes::DataType;
use datafusion::catalog::{
    CatalogProvider, CatalogProviderList, MemoryCatalogProvider, MemoryCatalogProviderList,
    MemorySchemaProvider, SchemaProvider, TableProvider,
};
use datafusion::common::ScalarValue;
use datafusion::execution::session_state::{SessionState, SessionStateBuilder};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::prelude::SessionContext;
use datafusion_postgres::datafusion_pg_catalog::pg_catalog::context::EmptyContextProvider;
use datafusion_postgres::datafusion_pg_catalog::pg_catalog::setup_pg_catalog;

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
        })
    }

    pub fn policy(&self) -> &Arc<Policy> {
        &self.policy
    }

    /// A new session for one connection.
    pub fn connect(&self) -> anyhow::Result<SessionContext> {
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
        for stub in CatalogStub::all() {
            ctx.register_udf(ScalarUDF::new_from_impl(stub));
        }
        ctx.register_udf(ScalarUDF::new_from_impl(JsonBuildObject::new()));
        Ok(ctx)
    }
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

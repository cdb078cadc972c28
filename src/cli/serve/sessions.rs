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
use datafusion::catalog::{
    CatalogProvider, CatalogProviderList, DynamicFileCatalog, MemoryCatalogProvider,
    MemoryCatalogProviderList, MemorySchemaProvider, SchemaProvider, TableProvider,
    UrlTableFactory,
};
use datafusion::datasource::dynamic_file::DynamicListTableFactory;
use datafusion::execution::session_state::{SessionState, SessionStateBuilder};
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
        let factory = Arc::new(DynamicListTableFactory::new(Default::default()));
        let checked = Arc::new(PathCheckedUrlTables {
            inner: Arc::clone(&factory) as Arc<dyn UrlTableFactory>,
            policy: Arc::clone(&self.policy),
        });
        let catalogs: Arc<dyn CatalogProviderList> =
            Arc::new(DynamicFileCatalog::new(Arc::new(catalogs), checked));
        let state = SessionStateBuilder::new_from_existing(self.template.clone())
            .with_catalog_list(catalogs)
            .build();
        let ctx = SessionContext::new_with_state(state);
        factory.session_store().with_state(ctx.state_weak_ref());
        // information_schema comes with the config; pg_catalog is what clients' catalog
        // queries (psql \d, JDBC getTables, BI tools) read.
        setup_pg_catalog(&ctx, DATABASE, EmptyContextProvider)
            .map_err(|e| anyhow::anyhow!("cannot set up pg_catalog: {e}"))?;
        Ok(ctx)
    }
}

//! `COPY (query) TO 'PATH' STORED AS DELTA [PARTITIONED BY (columns)]`: appends the query's
//! rows to the Delta table at PATH as one new version, creating the table from the query's
//! columns when there is none. The way to store what has no short column type in DDL (the
//! `*_state` structs of a daily monitoring job, fitted models) without creating the table first.
//!
//! DataFusion plans `COPY … STORED AS X` through the file format registered as X; this format
//! only writes (reading a Delta table goes through its log: `--table`, `delta_scan`,
//! `CREATE EXTERNAL TABLE … STORED AS DELTA`).

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::{not_impl_err, plan_err, GetExt, Result, Statistics};
use datafusion::datasource::file_format::file_compression_type::FileCompressionType;
use datafusion::datasource::file_format::{FileFormat, FileFormatFactory};
use datafusion::datasource::physical_plan::{FileScanConfig, FileSinkConfig, FileSource};
use datafusion::datasource::table_schema::TableSchema;
use datafusion::logical_expr::dml::InsertOp;
use datafusion::physical_expr::LexRequirement;
use datafusion::physical_plan::ExecutionPlan;
use object_store::{ObjectMeta, ObjectStore};

use super::{holds_delta_log, At, DeltaTableProvider};

/// `STORED AS DELTA` in `COPY … TO`.
#[derive(Debug, Default)]
pub(super) struct DeltaFormatFactory;

impl GetExt for DeltaFormatFactory {
    fn get_ext(&self) -> String {
        "delta".to_string()
    }
}

impl FileFormatFactory for DeltaFormatFactory {
    fn create(
        &self,
        _state: &dyn Session,
        format_options: &HashMap<String, String>,
    ) -> Result<Arc<dyn FileFormat>> {
        if let Some(key) = format_options.keys().find(|k| !k.starts_with("aws.")) {
            return plan_err!("COPY … STORED AS DELTA takes no option {key}");
        }
        Ok(Arc::new(DeltaFormat))
    }

    fn default(&self) -> Arc<dyn FileFormat> {
        Arc::new(DeltaFormat)
    }
}

#[derive(Debug)]
struct DeltaFormat;

fn read_here() -> Result<SchemaRef> {
    not_impl_err!(
        "a Delta table is read through its log: use --table NAME=PATH, delta_scan('PATH') or \
         CREATE EXTERNAL TABLE … STORED AS DELTA"
    )
}

#[async_trait]
impl FileFormat for DeltaFormat {
    fn get_ext(&self) -> String {
        "delta".to_string()
    }

    fn get_ext_with_compression(&self, _compression: &FileCompressionType) -> Result<String> {
        Ok(self.get_ext())
    }

    fn compression_type(&self) -> Option<FileCompressionType> {
        None
    }

    async fn infer_schema(
        &self,
        _state: &dyn Session,
        _store: &Arc<dyn ObjectStore>,
        _objects: &[ObjectMeta],
    ) -> Result<SchemaRef> {
        read_here()
    }

    async fn infer_stats(
        &self,
        _state: &dyn Session,
        _store: &Arc<dyn ObjectStore>,
        _table_schema: SchemaRef,
        _object: &ObjectMeta,
    ) -> Result<Statistics> {
        read_here().map(|_| Statistics::default())
    }

    async fn create_physical_plan(
        &self,
        _state: &dyn Session,
        _conf: FileScanConfig,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        read_here().map(|_| unreachable!())
    }

    /// Opens (or creates) the table at the COPY's location and appends the input to it: one
    /// commit, as `INSERT INTO` does.
    async fn create_writer_physical_plan(
        &self,
        input: Arc<dyn ExecutionPlan>,
        state: &dyn Session,
        conf: FileSinkConfig,
        _order_requirements: Option<LexRequirement>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let location = conf.original_url.as_str();
        let partitions: Vec<String> = conf
            .table_partition_cols
            .iter()
            .map(|(name, _)| name.clone())
            .collect();
        if !holds_delta_log(state, location).await? {
            let name = location
                .trim_end_matches('/')
                .rsplit('/')
                .next()
                .unwrap_or("table");
            super::sql::create_table(
                state,
                location,
                &format!("COPY … TO '{location}' STORED AS DELTA"),
                name,
                &input.schema(),
                &partitions,
            )
            .await?;
        }
        let table = DeltaTableProvider::open(state, location, At::Latest).await?;
        // The query's columns matched to the table's by name (INSERT INTO has DataFusion do
        // this; COPY does not).
        let input = super::provider::conform(input, &table.schema(), location)?;
        table.insert_into(state, input, InsertOp::Append).await
    }

    fn file_source(&self, table_schema: TableSchema) -> Arc<dyn FileSource> {
        // Never scanned (create_physical_plan refuses); DataFusion asks every format for one.
        Arc::new(datafusion::datasource::physical_plan::ParquetSource::new(
            table_schema,
        ))
    }
}

//! What Flight SQL clients ask before they query: `GetSqlInfo` (the server, what its SQL
//! supports), `GetXdbcTypeInfo` (the types, for JDBC and ODBC bridges), `GetTableTypes`, and
//! the catalogs, schemas and tables of a session (with each table's Arrow schema when asked),
//! read from the session's own catalog: what its SQL sees, views of its own included.

use datafusion::arrow::datatypes::Schema;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::datasource::TableType;
use datafusion::prelude::SessionContext;

use arrow_flight::sql::metadata::{
    GetDbSchemasBuilder, GetTablesBuilder, SqlInfoData, SqlInfoDataBuilder, XdbcTypeInfo,
    XdbcTypeInfoData, XdbcTypeInfoDataBuilder,
};
use arrow_flight::sql::{
    CommandGetCatalogs, CommandGetDbSchemas, CommandGetTableTypes, CommandGetTables, Nullable,
    Searchable, SqlInfo, SqlSupportedTransaction, XdbcDataType,
};

/// The table types a table listing names.
const TABLE_TYPES: [&str; 3] = ["TABLE", "VIEW", "LOCAL TEMPORARY"];

fn table_type(kind: TableType) -> &'static str {
    match kind {
        TableType::Base => TABLE_TYPES[0],
        TableType::View => TABLE_TYPES[1],
        TableType::Temporary => TABLE_TYPES[2],
    }
}

/// The server's answers to `GetSqlInfo`.
pub fn sql_info(
    read_only: bool,
    query_timeout_seconds: u64,
) -> arrow_flight::error::Result<SqlInfoData> {
    let mut info = SqlInfoDataBuilder::new();
    info.append(SqlInfo::FlightSqlServerName, "calibsql");
    info.append(SqlInfo::FlightSqlServerVersion, env!("CARGO_PKG_VERSION"));
    // The Arrow columnar format version (Schema.fbs), not a library's release.
    info.append(SqlInfo::FlightSqlServerArrowVersion, "1.3");
    info.append(SqlInfo::FlightSqlServerReadOnly, read_only);
    info.append(SqlInfo::FlightSqlServerSql, true);
    info.append(SqlInfo::FlightSqlServerSubstrait, false);
    info.append(
        SqlInfo::FlightSqlServerTransaction,
        SqlSupportedTransaction::None as i32,
    );
    info.append(SqlInfo::FlightSqlServerCancel, true);
    info.append(SqlInfo::FlightSqlServerBulkIngestion, false);
    info.append(
        SqlInfo::FlightSqlServerStatementTimeout,
        i32::try_from(query_timeout_seconds).unwrap_or(i32::MAX),
    );
    info.append(SqlInfo::SqlDdlCatalog, false);
    info.append(SqlInfo::SqlDdlSchema, !read_only);
    info.append(SqlInfo::SqlDdlTable, !read_only);
    info.append(SqlInfo::SqlIdentifierQuoteChar, "\"");
    info.append(SqlInfo::SqlSupportsColumnAliasing, true);
    info.append(SqlInfo::SqlNullPlusNullIsNull, true);
    info.append(SqlInfo::SqlSupportsTableCorrelationNames, true);
    info.append(SqlInfo::SqlSupportsOrderByUnrelated, true);
    info.append(SqlInfo::SqlSupportsLikeEscapeClause, true);
    info.append(SqlInfo::SqlSupportsNonNullableColumns, true);
    info.append(SqlInfo::SqlCatalogTerm, "database");
    info.append(SqlInfo::SqlSchemaTerm, "schema");
    info.append(SqlInfo::SqlCatalogAtStart, true);
    info.append(SqlInfo::SqlTransactionsSupported, false);
    info.build()
}

/// The types of `GetXdbcTypeInfo`: the SQL types calibsql's tables and results hold.
pub fn xdbc_types() -> arrow_flight::error::Result<XdbcTypeInfoData> {
    let mut types = XdbcTypeInfoDataBuilder::new();
    let kinds: [(&str, XdbcDataType, Option<i32>, Option<i32>); 11] = [
        ("BOOLEAN", XdbcDataType::XdbcBit, Some(1), None),
        ("TINYINT", XdbcDataType::XdbcTinyint, Some(8), Some(2)),
        ("SMALLINT", XdbcDataType::XdbcSmallint, Some(16), Some(2)),
        ("INTEGER", XdbcDataType::XdbcInteger, Some(32), Some(2)),
        ("BIGINT", XdbcDataType::XdbcBigint, Some(64), Some(2)),
        ("REAL", XdbcDataType::XdbcReal, Some(24), Some(2)),
        ("DOUBLE", XdbcDataType::XdbcDouble, Some(53), Some(2)),
        ("DECIMAL", XdbcDataType::XdbcDecimal, Some(38), Some(10)),
        ("VARCHAR", XdbcDataType::XdbcVarchar, None, None),
        ("DATE", XdbcDataType::XdbcDate, None, None),
        ("TIMESTAMP", XdbcDataType::XdbcTimestamp, None, None),
    ];
    for (name, data_type, column_size, radix) in kinds {
        let text = matches!(data_type, XdbcDataType::XdbcVarchar);
        let temporal = matches!(
            data_type,
            XdbcDataType::XdbcDate | XdbcDataType::XdbcTimestamp
        );
        types.append(XdbcTypeInfo {
            type_name: name.to_string(),
            data_type,
            column_size,
            literal_prefix: (text || temporal).then(|| "'".to_string()),
            literal_suffix: (text || temporal).then(|| "'".to_string()),
            create_params: None,
            nullable: Nullable::NullabilityNullable,
            case_sensitive: text,
            searchable: Searchable::Full,
            unsigned_attribute: radix.map(|_| false),
            fixed_prec_scale: false,
            auto_increment: radix.map(|_| false),
            local_type_name: Some(name.to_string()),
            minimum_scale: None,
            maximum_scale: None,
            sql_data_type: data_type,
            datetime_subcode: None,
            num_prec_radix: radix,
            interval_precision: None,
        });
    }
    types.build()
}

/// `GetTableTypes`.
pub fn table_types(command: CommandGetTableTypes) -> arrow_flight::error::Result<RecordBatch> {
    let mut builder = command.into_builder();
    for kind in TABLE_TYPES {
        builder.append(kind);
    }
    builder.build()
}

/// `GetCatalogs`: the session's catalogs (one, `calibsql`).
pub fn catalogs(
    ctx: &SessionContext,
    command: CommandGetCatalogs,
) -> arrow_flight::error::Result<RecordBatch> {
    let mut builder = command.into_builder();
    let mut names = ctx.catalog_names();
    names.sort();
    for name in names {
        builder.append(name);
    }
    builder.build()
}

/// Every (catalog, schema) of the session, sorted.
fn schemas(ctx: &SessionContext) -> Vec<(String, String)> {
    let mut all = Vec::new();
    for catalog_name in ctx.catalog_names() {
        let Some(catalog) = ctx.catalog(&catalog_name) else {
            continue;
        };
        for schema_name in catalog.schema_names() {
            all.push((catalog_name.clone(), schema_name));
        }
    }
    all.sort();
    all
}

/// `GetDbSchemas` (the builder applies the command's filters).
pub fn db_schemas(
    ctx: &SessionContext,
    command: CommandGetDbSchemas,
) -> arrow_flight::error::Result<RecordBatch> {
    let mut builder: GetDbSchemasBuilder = command.into_builder();
    for (catalog, schema) in schemas(ctx) {
        builder.append(catalog, schema);
    }
    builder.build()
}

/// `GetTables`, with each table's Arrow schema when the command asks (the builder applies
/// the command's filters; catalogs and schemas that cannot match are not opened).
pub async fn tables(
    ctx: &SessionContext,
    command: CommandGetTables,
) -> Result<RecordBatch, tonic::Status> {
    let catalog_filter = command.catalog.clone();
    let mut builder: GetTablesBuilder = command.into_builder();
    let empty = Schema::empty();
    for (catalog_name, schema_name) in schemas(ctx) {
        if catalog_filter
            .as_ref()
            .is_some_and(|wanted| wanted != &catalog_name)
        {
            continue;
        }
        let Some(schema) = ctx
            .catalog(&catalog_name)
            .and_then(|catalog| catalog.schema(&schema_name))
        else {
            continue;
        };
        let mut names = schema.table_names();
        names.sort();
        for name in names {
            let Some(table) = schema.table(&name).await.map_err(super::status::status)? else {
                continue;
            };
            let table_schema = table.schema();
            builder.append(
                &catalog_name,
                &schema_name,
                &name,
                table_type(table.table_type()),
                if builder.include_schema() {
                    table_schema.as_ref()
                } else {
                    &empty
                },
            )?;
        }
    }
    Ok(builder.build()?)
}

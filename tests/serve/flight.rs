//! Flight SQL (`--flight-bind`) with arrow-flight's own client, `FlightSqlServiceClient`:
//! refused without a token and with a wrong password, then logged in, a statement with the
//! CLI's numbers, a prepared statement with a bound parameter, `GetSqlInfo`, and a refusal
//! in the Postgres listener's words. The ADBC, polars and pyarrow.flight side is
//! python/tests/test_flight.py.

use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_flight::sql::client::FlightSqlServiceClient;
use arrow_flight::sql::SqlInfo;
use arrow_flight::FlightInfo;
use datafusion::arrow::array::{Float64Array, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::arrow::util::display::array_value_to_string;
use futures::TryStreamExt;
use tonic::transport::Channel;

use crate::{Fixture, Server, PASSWORD};

/// The Flight SQL port of `server` ("Flight SQL listening on 127.0.0.1:PORT"), once logged.
fn flight_port(server: &Server) -> u16 {
    let started = Instant::now();
    loop {
        let log = server.log();
        if let Some(rest) = log.split("Flight SQL listening on 127.0.0.1:").nth(1) {
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            return digits.parse().unwrap();
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no Flight SQL listener:\n{log}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Every row of `info`'s result as CSV cells (what `calibsql --format csv` prints, header
/// first).
async fn csv(client: &mut FlightSqlServiceClient<Channel>, info: FlightInfo) -> String {
    let mut batches: Vec<RecordBatch> = Vec::new();
    for endpoint in info.endpoint {
        let ticket = endpoint.ticket.expect("an endpoint with a ticket");
        let stream = client.do_get(ticket).await.unwrap();
        batches.extend(stream.try_collect::<Vec<_>>().await.unwrap());
    }
    let schema = batches[0].schema();
    let mut text = schema
        .fields()
        .iter()
        .map(|f| f.name().as_str())
        .collect::<Vec<_>>()
        .join(",");
    text.push('\n');
    for batch in &batches {
        for row in 0..batch.num_rows() {
            let cells: Vec<String> = batch
                .columns()
                .iter()
                .map(|c| array_value_to_string(c, row).unwrap())
                .collect();
            text.push_str(&cells.join(","));
            text.push('\n');
        }
    }
    text
}

#[test]
fn flight_sql_client_logs_in_queries_and_prepares() {
    let fixture = Fixture::new();
    let server = fixture.serve(&["--flight-bind", "127.0.0.1:0"]);
    let port = flight_port(&server);
    let sql = "SELECT count(*) AS n, ece(p_model, click) AS ece FROM t";
    let expected = fixture.cli_csv(sql);
    let bound_sql = "SELECT count(*) AS n FROM t WHERE p_model > 0.5";
    let bound_expected = fixture.cli_csv(bound_sql);
    let refusal = server.psql_error("COPY (SELECT 1 AS x) TO '/tmp/calibsql-flight-rs.csv'");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let channel = Channel::from_shared(format!("http://127.0.0.1:{port}"))
            .unwrap()
            .connect()
            .await
            .unwrap();
        let mut client = FlightSqlServiceClient::new(channel);

        let error = client.execute(sql.to_string(), None).await.unwrap_err();
        assert!(error.to_string().contains("no token"), "{error}");
        let error = client.handshake("analyst", "wrong").await.unwrap_err();
        // (The client's error quotes the message, escaping its quotes.)
        assert!(
            error
                .to_string()
                .contains("password authentication failed for user"),
            "{error}"
        );
        client.handshake("analyst", PASSWORD).await.unwrap();
        assert!(client.token().is_some());

        let info = client.execute(sql.to_string(), None).await.unwrap();
        crate::assert_same_csv(&csv(&mut client, info).await, &expected);

        let mut prepared = client
            .prepare(
                "SELECT count(*) AS n FROM t WHERE p_model > $1".to_string(),
                None,
            )
            .await
            .unwrap();
        assert_eq!(prepared.parameter_schema().unwrap().fields().len(), 1);
        let parameters = RecordBatch::try_new(
            Arc::new(Schema::new(vec![Field::new("$1", DataType::Float64, true)])),
            vec![Arc::new(Float64Array::from(vec![0.5]))],
        )
        .unwrap();
        prepared.set_parameters(parameters).unwrap();
        let info = prepared.execute().await.unwrap();
        crate::assert_same_csv(&csv(&mut client, info).await, &bound_expected);
        prepared.close().await.unwrap();

        let info = client
            .get_sql_info(vec![SqlInfo::FlightSqlServerName])
            .await
            .unwrap();
        assert!(csv(&mut client, info).await.contains("calibsql"));

        let error = client
            .execute(
                "COPY (SELECT 1 AS x) TO '/tmp/calibsql-flight-rs.csv'".to_string(),
                None,
            )
            .await
            .unwrap_err();
        let words = refusal
            .lines()
            .find_map(|l| l.strip_prefix("ERROR:  "))
            .expect("psql's error line");
        assert!(error.to_string().contains(words), "{error} / {words}");
    });
    assert!(!std::path::Path::new("/tmp/calibsql-flight-rs.csv").exists());
}

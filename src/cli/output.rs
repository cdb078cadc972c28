//! Writing query results: the output sink (standard output or `-o FILE`) and the four formats;
//! errors as the one `Error:` line on standard error, and [`Interrupted`] (Ctrl-C).

use std::fs::File;
use std::io::{self, BufWriter, IsTerminal, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::Context;
use datafusion::arrow::array::{ArrayRef, RecordBatch, StringBuilder};
use datafusion::arrow::csv;
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::arrow::error::ArrowError;
use datafusion::arrow::json::writer::{make_encoder, EncoderOptions};
use datafusion::arrow::json::{self, writer::JsonArray, writer::LineDelimited};
use datafusion::arrow::util::display::FormatOptions;
use datafusion::arrow::util::pretty::pretty_format_batches_with_options;
use datafusion::execution::SendableRecordBatchStream;
use futures::StreamExt;

use super::args::OutputFormat;
use super::progress::Progress;

/// Ctrl-C stopped a statement.
#[derive(Debug)]
pub struct Interrupted;

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("interrupted")
    }
}

impl std::error::Error for Interrupted {}

/// Prints `Error: …` on one line of standard error.
pub fn print_error(error: &anyhow::Error) {
    let _ = writeln!(io::stderr(), "Error: {}", calibsql::errors::message(error));
}

/// Set once a write to standard output fails because the reader went away (`| head`).
static STDOUT_CLOSED: AtomicBool = AtomicBool::new(false);

/// Whether standard output was closed by its reader; the program then stops quietly with
/// exit code 0.
pub fn stdout_closed() -> bool {
    STDOUT_CLOSED.load(Ordering::Relaxed)
}

/// Where results go. Notes a broken pipe on standard output, whatever error type a writer
/// later wraps it in.
pub struct Sink {
    inner: BufWriter<Box<dyn Write + Send>>,
    is_stdout: bool,
    is_terminal: bool,
}

impl Sink {
    pub fn stdout() -> Sink {
        let stdout = io::stdout();
        let is_terminal = stdout.is_terminal();
        Sink {
            inner: BufWriter::with_capacity(64 * 1024, Box::new(stdout)),
            is_stdout: true,
            is_terminal,
        }
    }

    pub fn file(path: &Path) -> anyhow::Result<Sink> {
        let file =
            File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
        Ok(Sink {
            inner: BufWriter::with_capacity(64 * 1024, Box::new(file)),
            is_stdout: false,
            is_terminal: false,
        })
    }

    /// Whether the results land on a terminal (then progress must not draw over them).
    pub fn is_terminal(&self) -> bool {
        self.is_terminal
    }

    fn note<T>(&self, result: io::Result<T>) -> io::Result<T> {
        if let Err(e) = &result {
            if self.is_stdout && e.kind() == io::ErrorKind::BrokenPipe {
                STDOUT_CLOSED.store(true, Ordering::Relaxed);
            }
        }
        result
    }
}

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let result = self.inner.write(buf);
        self.note(result)
    }

    fn flush(&mut self) -> io::Result<()> {
        let result = self.inner.flush();
        self.note(result)
    }
}

/// What printing one result did.
#[derive(Debug, Clone, Copy, Default)]
pub struct Printed {
    /// Rows the query returned.
    pub rows: usize,
    /// Rows written out (fewer than `rows` when `--max-rows` cut a table).
    pub shown: usize,
}

/// Writes each query's result in the chosen format.
pub struct Printer {
    format: OutputFormat,
    sink: Sink,
    max_rows: Option<usize>,
}

impl Printer {
    pub fn new(format: OutputFormat, sink: Sink, max_rows: Option<usize>) -> Printer {
        Printer {
            format,
            sink,
            max_rows,
        }
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.sink.flush()
    }

    /// Drains `stream` into the output. `progress` is stopped before the first write if the
    /// output is the terminal it draws on.
    pub async fn print(
        &mut self,
        mut stream: SendableRecordBatchStream,
        progress: &Progress,
    ) -> anyhow::Result<Printed> {
        let schema = stream.schema();
        let mut printed = Printed::default();
        match self.format {
            OutputFormat::Table => {
                let limit = self.max_rows.unwrap_or(usize::MAX);
                let mut kept = Vec::new();
                while let Some(batch) = stream.next().await {
                    let batch = batch?;
                    printed.rows += batch.num_rows();
                    let room = limit - printed.shown;
                    if room > 0 && batch.num_rows() > 0 {
                        let batch = batch.slice(0, room.min(batch.num_rows()));
                        printed.shown += batch.num_rows();
                        kept.push(batch);
                    }
                }
                if kept.is_empty() {
                    kept.push(RecordBatch::new_empty(schema));
                }
                let options = FormatOptions::default()
                    .with_null("NULL")
                    .with_display_error(true);
                let table = pretty_format_batches_with_options(&kept, &options)?;
                progress.stop();
                writeln!(self.sink, "{table}")?;
            }
            OutputFormat::Csv => {
                let is_terminal = self.sink_is_terminal();
                let mut writer = csv::WriterBuilder::new()
                    .with_header(true)
                    .build(&mut self.sink);
                let mut wrote = false;
                while let Some(batch) = stream.next().await {
                    let batch = batch?;
                    if batch.num_rows() == 0 {
                        continue;
                    }
                    stop_if_terminal(progress, wrote, is_terminal);
                    writer.write(&nested_as_json(&batch)?)?;
                    wrote = true;
                    printed.rows += batch.num_rows();
                }
                if !wrote {
                    // Header only.
                    writer.write(&nested_as_json(&RecordBatch::new_empty(schema))?)?;
                }
                drop(writer);
            }
            OutputFormat::Json => {
                printed.rows = self.write_json::<JsonArray>(stream, progress).await?;
                writeln!(self.sink)?;
            }
            OutputFormat::Ndjson => {
                printed.rows = self.write_json::<LineDelimited>(stream, progress).await?;
            }
        }
        if self.format != OutputFormat::Table {
            printed.shown = printed.rows;
        }
        self.sink.flush()?;
        Ok(printed)
    }

    /// Writes `stream` as JSON in the layout `F` (an array, or one object per line); returns
    /// the rows written.
    async fn write_json<F: json::writer::JsonFormat>(
        &mut self,
        mut stream: SendableRecordBatchStream,
        progress: &Progress,
    ) -> anyhow::Result<usize> {
        let is_terminal = self.sink_is_terminal();
        let mut writer = json::WriterBuilder::new()
            .with_explicit_nulls(true)
            .build::<_, F>(&mut self.sink);
        let mut rows = 0;
        while let Some(batch) = stream.next().await {
            let batch = batch?;
            stop_if_terminal(progress, rows > 0, is_terminal);
            writer.write(&batch)?;
            rows += batch.num_rows();
        }
        writer.finish()?;
        Ok(rows)
    }

    fn sink_is_terminal(&self) -> bool {
        self.sink.is_terminal()
    }
}

/// The batch with each nested column (a struct such as a fitted model, a list, a map)
/// replaced by its values as JSON text, which CSV cannot hold otherwise: `{"method":"platt",
/// "a":1.2,…}` in one quoted cell, NULL left an empty cell. Other columns are unchanged.
pub(crate) fn nested_as_json(batch: &RecordBatch) -> Result<RecordBatch, ArrowError> {
    if !batch.columns().iter().any(|c| c.data_type().is_nested()) {
        return Ok(batch.clone());
    }
    let options = EncoderOptions::default().with_explicit_nulls(true);
    let mut fields = Vec::with_capacity(batch.num_columns());
    let mut columns = Vec::with_capacity(batch.num_columns());
    for (field, column) in batch.schema().fields().iter().zip(batch.columns()) {
        if !column.data_type().is_nested() {
            fields.push(field.clone());
            columns.push(column.clone());
            continue;
        }
        let mut encoder = make_encoder(field, column.as_ref(), &options)?;
        let mut text = StringBuilder::new();
        let mut buf = Vec::new();
        for i in 0..column.len() {
            if encoder.is_null(i) {
                text.append_null();
                continue;
            }
            buf.clear();
            encoder.encode(i, &mut buf);
            text.append_value(String::from_utf8_lossy(&buf));
        }
        fields.push(Arc::new(Field::new(field.name(), DataType::Utf8, true)));
        columns.push(Arc::new(text.finish()) as ArrayRef);
    }
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)
}

fn stop_if_terminal(progress: &Progress, already: bool, sink_is_terminal: bool) {
    if !already && sink_is_terminal {
        progress.stop();
    }
}

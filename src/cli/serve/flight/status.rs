//! Errors as gRPC statuses, in the words the Postgres face uses.

use datafusion::common::DataFusionError;
use tonic::Status;

use super::super::policy::refusal;

/// A DataFusion error as a gRPC status, in the words the Postgres face uses (a policy's
/// refusal word for word).
pub fn status(e: DataFusionError) -> Status {
    if let Some(refused) = refusal(&e) {
        return Status::permission_denied(refused.0.clone());
    }
    let message = calibsql::errors::datafusion_message(&e);
    match e.find_root() {
        DataFusionError::SQL(..) | DataFusionError::Plan(_) | DataFusionError::SchemaError(..) => {
            Status::invalid_argument(message)
        }
        DataFusionError::ResourcesExhausted(_) => Status::resource_exhausted(message),
        DataFusionError::NotImplemented(_) => Status::unimplemented(message),
        DataFusionError::Execution(_) => Status::invalid_argument(message),
        _ => Status::internal(message),
    }
}

pub fn arrow_status(e: datafusion::arrow::error::ArrowError) -> Status {
    status(DataFusionError::ArrowError(Box::new(e), None))
}

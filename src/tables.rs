//! Table registration (owned by the CLI work).

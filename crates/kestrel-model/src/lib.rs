//! kestrel-model

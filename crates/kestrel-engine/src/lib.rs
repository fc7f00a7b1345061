//! kestrel-engine

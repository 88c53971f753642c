//! tokenmill engine.

//! tokenmill server.

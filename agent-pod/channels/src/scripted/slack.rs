//! A scripted slack server (being built).

//! A scripted telegram server (being built).

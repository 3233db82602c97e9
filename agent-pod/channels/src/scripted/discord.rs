//! A scripted discord server (being built).

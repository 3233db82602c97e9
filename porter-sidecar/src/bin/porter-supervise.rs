//! `porter-supervise`: the per-call supervisor Porter runs every CLI under (see
//! `porter::supervisor`). A binary of its own because it is exec'd once per call, and
//! loading the whole daemon for that costs milliseconds.

fn main() {
    let status = porter::supervisor::main_if_asked().unwrap_or_else(|| {
        eprintln!("porter-supervise: started by porter for each call, not by hand");
        2
    });
    std::process::exit(status);
}

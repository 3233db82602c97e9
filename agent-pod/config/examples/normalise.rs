//! Reads a rendered config on stdin, validates it and prints its canonical form.
use std::io::Read;

fn main() {
    let mut text = String::new();
    std::io::stdin()
        .read_to_string(&mut text)
        .expect("read stdin");
    match saint_config::BotConfig::from_json(&text) {
        Ok(config) => print!("{}", config.to_json()),
        Err(error) => {
            eprintln!("error: {error}");
            std::process::exit(1);
        }
    }
}

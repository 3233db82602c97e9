//! Writes the CRD YAML of every Saint resource into a directory (default `crds/`).

fn main() -> std::io::Result<()> {
    let directory = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "crds".to_string());
    std::fs::create_dir_all(&directory)?;
    for (file_name, crd) in saint_operator::crd::all_crds() {
        std::fs::write(
            format!("{directory}/{file_name}"),
            saint_operator::crd::crd_yaml(&crd),
        )?;
    }
    Ok(())
}

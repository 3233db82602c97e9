//! Shared test fixtures: the real local model and a generated company memory.
#![allow(dead_code)]

use std::{
    path::Path,
    sync::{Arc, OnceLock},
};

use saint_config::MemoryScope;
use saint_memory::{Embedder, IndexOptions, LocalMiniLm, MemoryIndex, Scope, default_model_dir};

/// The real all-MiniLM-L6-v2, loaded once per test binary. A missing model fails the
/// test with instructions; it is never skipped.
pub fn model() -> Arc<LocalMiniLm> {
    static MODEL: OnceLock<Arc<LocalMiniLm>> = OnceLock::new();
    MODEL
        .get_or_init(|| {
            let directory = default_model_dir();
            match LocalMiniLm::load(&directory) {
                Ok(model) => Arc::new(model),
                Err(error) => panic!(
                    "the embedding model is required for this test and was not found ({error}). \
                     Run agent-pod/memory/fetch-model.sh (or set SAINT_MODEL_DIR to a directory \
                     with model.safetensors, config.json and tokenizer.json)."
                ),
            }
        })
        .clone()
}

pub fn embedder() -> Arc<dyn Embedder> {
    model()
}

pub fn write(root: &Path, relative: &str, text: &str) {
    let path = root.join(relative);
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    std::fs::write(path, text).expect("write");
}

/// The owner's memory scopes: shared, private, daily notes and every person's folder.
pub fn owner_scopes() -> Vec<MemoryScope> {
    vec![
        MemoryScope::Shared,
        MemoryScope::Private,
        MemoryScope::Daily,
        MemoryScope::OwnUser,
        MemoryScope::AllUsers,
    ]
}
pub fn manager_scopes() -> Vec<MemoryScope> {
    vec![
        MemoryScope::Shared,
        MemoryScope::Daily,
        MemoryScope::OwnUser,
        MemoryScope::AllUsers,
    ]
}
pub fn employee_scopes() -> Vec<MemoryScope> {
    vec![MemoryScope::Shared, MemoryScope::OwnUser]
}
pub fn external_scopes() -> Vec<MemoryScope> {
    vec![MemoryScope::OwnUser]
}

/// How many private notes about the acquisition are generated: far more than the
/// search's candidate pool, so a post-filter would leave an employee with nothing.
pub const ACQUISITION_NOTES: usize = 40;

/// A small company's memory: shared knowledge, owner-only notes (including many on
/// one topic), daily logs and per-person notes.
pub fn company_memory(root: &Path) {
    write(
        root,
        "MEMORY.md",
        "# Acme Bikes assistant memory\n\nAcme Bikes sells and repairs city bicycles in Zagreb.\nThe owner is Ivana; the shop manager is Marko.\n",
    );
    write(
        root,
        "memory/shared/products.md",
        "# Products\n\n## City bikes\nThe Acme Urban 3 is our best-selling city bicycle, with a steel frame and hub gears.\n\n## E-bikes\nThe Acme Volt has a 400 Wh battery and a range of about 70 km.\n",
    );
    write(
        root,
        "memory/shared/office.md",
        "# Office\n\nOur parking garage is beneath the building; visitors get a free ticket at reception.\n\nThe shop opens at 9:00 and closes at 18:00 on weekdays.\n",
    );
    write(
        root,
        "memory/shared/acquisitions-faq.md",
        "# Company news for staff\n\nThe company is growing: we hired two mechanics this autumn.\nQuestions about company plans go to Ivana.\n",
    );
    for (number, customer, amount) in [
        ("INV-2024-0041", "Pedal Club", "1,200"),
        ("INV-2024-0042", "Zagreb Couriers", "3,450"),
        ("INV-2024-0043", "Hotel Esplanade", "780"),
        ("INV-2024-0044", "City Library", "2,100"),
    ] {
        write(
            root,
            &format!("memory/shared/billing/{}.md", number.to_lowercase()),
            &format!(
                "# Invoice {number}\n\nCustomer: {customer}\nAmount: EUR {amount}\nStatus: sent, payment due in 30 days.\n"
            ),
        );
    }
    write(
        root,
        "memory/private/finances.md",
        "# Finances\n\nRevenue 2025: EUR 1.2 million. Net margin 8%.\nMarko's salary: EUR 2,400 per month.\n",
    );
    write(
        root,
        "memory/private/strategy.md",
        "# Strategy\n\nWe plan to acquire our competitor Brzi Bicikli in spring; the offer is EUR 300,000.\nKeep the acquisition confidential until the contract is signed.\n",
    );
    for index in 0..ACQUISITION_NOTES {
        write(
            root,
            &format!("memory/private/acquisition/meeting-{index:02}.md"),
            &format!(
                "# Acquisition meeting {index}\n\nWe discussed the plan to acquire our competitor Brzi Bicikli; due diligence item {index} is open and the purchase price stays EUR 300,000.\n"
            ),
        );
    }
    write(
        root,
        "memory/daily/2026-11-20.md",
        "# 2026-11-20\n\nRepaired twelve bikes. A courier van delivered fifty inner tubes.\n",
    );
    write(
        root,
        "memory/daily/2026-11-21.md",
        "# 2026-11-21\n\nQuiet day. Marko inventoried the spare parts shelf.\n",
    );
    write(
        root,
        "memory/users/ana/preferences.md",
        "# Ana's preferences\n\nAna wants answers in Croatian, as short bullet points.\n",
    );
    write(
        root,
        "memory/users/ana/notes.md",
        "# Notes about Ana\n\nAna handles the webshop and asked about the competitor acquisition rumours last week.\n",
    );
    write(
        root,
        "memory/users/marko/notes.md",
        "# Notes about Marko\n\nMarko runs the workshop and orders spare parts every Monday.\n",
    );
    write(
        root,
        "memory/users/client-xyz/context.md",
        "# Client XYZ\n\nClient XYZ rents ten bikes for tourists every summer.\n",
    );
}

/// A company memory indexed into a fresh database; the temp dir must outlive the index.
pub fn indexed_company() -> (tempfile::TempDir, Arc<MemoryIndex>) {
    let directory = tempfile::tempdir().expect("tempdir");
    company_memory(directory.path());
    let index =
        MemoryIndex::open(IndexOptions::new(directory.path()), embedder()).expect("open index");
    index.reindex_all().expect("reindex");
    (directory, Arc::new(index))
}

pub fn scope(scopes: &[MemoryScope], slug: &str) -> Scope {
    Scope::for_role(scopes, slug)
}

/// Whether `path` is one the scope's role table row allows (checked independently of
/// the index, by prefix, to catch a wrong SQL filter).
pub fn allowed_by_table(scopes: &[MemoryScope], slug: &str, path: &str) -> bool {
    scopes.iter().any(|scope| match scope {
        MemoryScope::Shared => path.starts_with("memory/shared/") || path == "MEMORY.md",
        MemoryScope::Private => {
            path.starts_with("memory/private/") || path == "COMPANY.md" || path == "TOOLS.md"
        }
        MemoryScope::Daily => path.starts_with("memory/daily/"),
        MemoryScope::OwnUser => path.starts_with(&format!("memory/users/{slug}/")),
        MemoryScope::AllUsers => path.starts_with("memory/users/"),
    })
}

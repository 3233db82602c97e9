//! Benchmark: what installed skills cost a turn that does not use them. The owner of the
//! example company (role `skills: all`) gets a system prompt built by the runtime's own
//! builder with 0 and with 50 realistic skills in the workspace (descriptions of about
//! 80–160 characters, bodies of several kilobytes). Reports, as medians of one run:
//! the prompt's size in tokens by the runtime's estimate
//! (`saint_agent::runtime::estimate_tokens`, 4 characters per token), the tokens each
//! listed skill adds (target: under 40), what the bodies would have added had they been
//! inlined (they add nothing: they are checked to be absent), and the time to build the
//! prompt. The `skill` tool's own specification, offered once whenever any skill is
//! allowed, is reported on its own line.
//!
//! Run: `cargo bench -p saint-agent --bench skills_prompt`.

use std::{fs, path::Path, time::Instant};

use saint_agent::{
    prompt::{PromptInputs, system_prompt},
    runtime::estimate_tokens,
};
use saint_config::BotConfig;
use saint_llm::{ChatRequest, ToolSpec};
use saint_tools::{
    Tool,
    skills::{SkillCatalog, SkillTool},
    test_fixtures::caller,
};

const SKILLS: usize = 50;
const WARMUP: usize = 20;
const MEASURED: usize = 301;

/// Fifty skills as a company would install them: a name and a one-sentence "what and
/// when" description.
const TOPICS: [(&str, &str); SKILLS] = [
    (
        "google-workspace",
        "Read and send Gmail, manage Calendar events and Drive files with the gog CLI; use for mail, meetings and shared documents.",
    ),
    (
        "scheduling",
        "Find a meeting time across several people's calendars, propose slots and send invitations.",
    ),
    (
        "pdf-forms",
        "Fill, merge, split and extract text from PDF files; use when a form must be completed or documents combined.",
    ),
    (
        "invoices",
        "Issue, number and archive customer invoices in the company format, with VAT rules for Croatia and the EU.",
    ),
    (
        "expense-reports",
        "Turn receipts into a monthly expense report and check each line against the travel policy.",
    ),
    (
        "supplier-research",
        "Compare suppliers on price, delivery time and terms and summarise the findings in a table.",
    ),
    (
        "contract-review",
        "Review a contract draft for payment terms, liability, termination and renewal clauses and flag risks.",
    ),
    (
        "github",
        "Open issues, review pull requests and check CI runs with the gh CLI.",
    ),
    (
        "spreadsheets",
        "Clean, pivot and chart CSV or XLSX data; use for sales figures, inventories and budgets.",
    ),
    (
        "presentations",
        "Draft slide decks from notes with a title, agenda, one idea per slide and speaker notes.",
    ),
    (
        "translation-hr-en",
        "Translate between Croatian and English, keeping names, amounts and legal terms exact.",
    ),
    (
        "customer-support",
        "Answer customer questions from the product FAQ and escalate refunds or complaints to a person.",
    ),
    (
        "social-media",
        "Write and schedule posts for LinkedIn and Instagram in the brand voice, with image suggestions.",
    ),
    (
        "newsletter",
        "Assemble the monthly newsletter from recent news, products and events, ready to send.",
    ),
    (
        "hiring",
        "Write job ads, screen CVs against the role's criteria and schedule interviews.",
    ),
    (
        "onboarding",
        "Prepare a new employee's first week: accounts, equipment, introductions and reading list.",
    ),
    (
        "payroll-questions",
        "Explain payslips, leave balances and overtime rules; never change payroll data.",
    ),
    (
        "inventory",
        "Track anvil stock levels, reorder points and incoming deliveries from the warehouse sheet.",
    ),
    (
        "shipping",
        "Book courier pickups, create shipping labels and track parcels with the carrier's API.",
    ),
    (
        "quotes",
        "Prepare customer quotes from the price list with discounts, delivery terms and validity.",
    ),
    (
        "crm-updates",
        "Log calls and meetings in the CRM and update deal stages after each customer contact.",
    ),
    (
        "meeting-notes",
        "Turn a meeting transcript into decisions, action items with owners and a short summary.",
    ),
    (
        "travel-booking",
        "Find and compare flights, trains and hotels within the travel policy and hold bookings.",
    ),
    (
        "legal-deadlines",
        "Track court, tax and regulatory deadlines and remind the responsible person in time.",
    ),
    (
        "tax-calendar",
        "List the monthly and yearly tax filings due, with amounts to prepare and where to file.",
    ),
    (
        "bank-reconciliation",
        "Match bank statement lines to invoices and payments and list what does not match.",
    ),
    (
        "market-news",
        "Summarise this week's news about steel prices, competitors and the tool market.",
    ),
    (
        "website-updates",
        "Edit product pages and blog posts on the company website through its CMS.",
    ),
    (
        "seo-audit",
        "Check web pages for titles, descriptions, broken links and page speed, and suggest fixes.",
    ),
    (
        "email-drafting",
        "Draft clear, polite business e-mails in Croatian or English from a few bullet points.",
    ),
    (
        "complaint-handling",
        "Handle a customer complaint: acknowledge, investigate the order and propose a remedy.",
    ),
    (
        "warranty-claims",
        "Check warranty eligibility for a returned product and prepare the replacement order.",
    ),
    (
        "product-catalogue",
        "Keep the product catalogue consistent: names, sizes, weights, prices and photos.",
    ),
    (
        "price-updates",
        "Apply a price change across the price list, quotes in progress and the online shop.",
    ),
    (
        "trade-fairs",
        "Plan a trade fair: booth booking, samples, travel and a list of visitors to follow up.",
    ),
    (
        "grant-applications",
        "Find EU and national grants that fit a project and draft the application sections.",
    ),
    (
        "board-reports",
        "Prepare the quarterly board report from sales, costs, cash and key risks.",
    ),
    (
        "cash-flow",
        "Forecast cash flow for the next 13 weeks from open invoices, bills and payroll.",
    ),
    (
        "it-helpdesk",
        "Walk a colleague through common IT problems: passwords, printers, VPN and e-mail setup.",
    ),
    (
        "security-checklist",
        "Review accounts, devices and backups against the company's security checklist.",
    ),
    (
        "gdpr-requests",
        "Handle a person's GDPR access or deletion request within the legal deadline.",
    ),
    (
        "purchase-orders",
        "Create purchase orders from approved requests and send them to suppliers.",
    ),
    (
        "vendor-onboarding",
        "Collect a new supplier's company details, bank account and certificates for approval.",
    ),
    (
        "quality-checks",
        "Record incoming goods inspections and open a claim for defective deliveries.",
    ),
    (
        "fleet",
        "Track company vehicles' service dates, registrations, fuel cards and mileage.",
    ),
    (
        "office-supplies",
        "Keep the office supplies list stocked and order what runs low every Friday.",
    ),
    (
        "event-planning",
        "Organise a team event: date poll, venue, catering, budget and invitations.",
    ),
    (
        "knowledge-base",
        "Write and update internal how-to articles so answers are found without asking.",
    ),
    (
        "data-cleanup",
        "Find duplicate customers and contacts and merge them without losing history.",
    ),
    (
        "weekly-summary",
        "Summarise the week's sales, support tickets and open tasks for the Monday meeting.",
    ),
];

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let middle = values.len() / 2;
    if values.len().is_multiple_of(2) {
        f64::midpoint(values[middle - 1], values[middle])
    } else {
        values[middle]
    }
}

/// A few kilobytes of instructions, as real skills have.
fn body(name: &str, description: &str) -> String {
    let mut body = format!("# {name}\n\nBODY-MARKER-{name}\n\n{description}\n\n## Steps\n\n");
    for step in 1..=40 {
        body.push_str(&format!(
            "{step}. Check the request against the company's rules for {name}, gather what is \
             missing from the person, and confirm before sending anything outside the company.\n"
        ));
    }
    body
}

fn install(workspace: &Path, count: usize) -> usize {
    let _ = fs::remove_dir_all(workspace.join("skills"));
    let mut body_bytes = 0;
    for (name, description) in TOPICS.iter().take(count) {
        let folder = workspace.join("skills").join(name);
        fs::create_dir_all(&folder).unwrap();
        let body = body(name, description);
        body_bytes += body.len();
        fs::write(
            folder.join("SKILL.md"),
            format!(
                "---\nname: {name}\ndescription: {description}\nlicense: proprietary\n---\n\n{body}"
            ),
        )
        .unwrap();
    }
    body_bytes
}

fn tokens(system: &str, tools: Vec<ToolSpec>) -> u64 {
    estimate_tokens(&ChatRequest {
        model: String::new(),
        system: system.to_string(),
        messages: Vec::new(),
        tools,
        max_tokens: 0,
    })
}

struct Measured {
    prompt: String,
    build_ms: f64,
}

// A turn reads the skills once and builds the prompt from them: both are timed.
fn build(config: &BotConfig, workspace: &Path, caller: &saint_tools::Caller) -> String {
    let skills = SkillCatalog::load(workspace, config);
    system_prompt(&PromptInputs {
        caller,
        config,
        workspace,
        tool_names: &["read", "write", "exec", "skill"],
        skills: Some(&skills),
    })
}

fn measure(config: &BotConfig, workspace: &Path) -> Measured {
    let caller = caller(config, "ana");
    for _ in 0..WARMUP {
        std::hint::black_box(build(config, workspace, &caller));
    }
    let mut times = Vec::with_capacity(MEASURED);
    let mut prompt = String::new();
    for _ in 0..MEASURED {
        let started = Instant::now();
        prompt = std::hint::black_box(build(config, workspace, &caller));
        times.push(started.elapsed().as_secs_f64() * 1_000.0);
    }
    Measured {
        prompt,
        build_ms: median(times),
    }
}

fn main() {
    let config: BotConfig = serde_json::from_str(include_str!(
        "../config/tests/fixtures/acme-bot-config.json"
    ))
    .unwrap();
    assert!(
        matches!(config.roles["owner"].skills, saint_config::Skills::All),
        "the owner may use every skill"
    );
    let directory = tempfile::tempdir().unwrap();
    let workspace = directory.path().canonicalize().unwrap();
    for (file, text) in [
        (
            "SOUL.md",
            "You are Acme's helpful colleague. Be brief and exact.",
        ),
        ("IDENTITY.md", "Your name is Acme Assistant."),
        ("AGENTS.md", "Operating notes for the owner."),
        ("USER.md", "The people of Acme."),
        ("COMPANY.md", "Acme sells anvils."),
    ] {
        fs::write(workspace.join(file), text).unwrap();
    }

    install(&workspace, 0);
    let without = measure(&config, &workspace);
    let body_bytes = install(&workspace, SKILLS);
    let with = measure(&config, &workspace);

    let listed = with.prompt.matches("\n- ").count();
    assert!(
        listed >= SKILLS,
        "all {SKILLS} skills are listed ({listed} list lines)"
    );
    assert!(
        !with.prompt.contains("BODY-MARKER-"),
        "no skill body may reach the prompt"
    );
    assert!(!without.prompt.contains("## Skills"));

    let skill_tool = ToolSpec {
        name: SkillTool.name().to_string(),
        description: SkillTool.description().to_string(),
        input_schema: SkillTool.input_schema(),
    };
    let tool_tokens = tokens("", vec![skill_tool]);
    let tokens_without = tokens(&without.prompt, Vec::new());
    let tokens_with = tokens(&with.prompt, Vec::new());
    let per_skill = (tokens_with - tokens_without) as f64 / SKILLS as f64;
    let bodies_inlined = (body_bytes / 4) as u64;

    println!("## Skills in the system prompt (owner, skills: all; {MEASURED} builds each)\n");
    println!("| | 0 skills | {SKILLS} skills |");
    println!("|---|---:|---:|");
    println!("| system prompt, tokens (estimate) | {tokens_without} | {tokens_with} |");
    println!(
        "| build time, median ms | {:.3} | {:.3} |",
        without.build_ms, with.build_ms
    );
    println!(
        "| skill bodies in the prompt, tokens | 0 | 0 (would be {bodies_inlined} if inlined) |"
    );
    println!();
    println!(
        "tokens per listed skill: {per_skill:.1} (target < 40) — {}",
        if per_skill < 40.0 { "met" } else { "NOT met" }
    );
    println!(
        "the `skill` tool's specification, offered once when any skill is allowed: {tool_tokens} tokens"
    );
}

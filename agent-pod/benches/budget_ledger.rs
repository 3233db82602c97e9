//! Benchmark: what the budget ledger adds to a model call. Every call of a person with a
//! budget reserves its worst case before the call and settles after it; this measures
//! that reserve + settle on its own (one caller, and 200 callers of one person at once)
//! and a whole turn's agent overhead with and without a budget, against the same
//! scripted model answering instantly. Reports medians from one run.
//!
//! Run: `cargo bench -p saint-agent --bench budget_ledger`.

#[path = "../tests/common/mod.rs"]
mod common;

use std::{
    convert::Infallible,
    time::{Duration, Instant},
};

use common::*;
use saint_agent::{
    budget::{self, SpendLedger},
    runtime::{Inbound, RuntimeOptions},
};
use saint_config::{Budget, BudgetPeriod, ChannelIdentity, ChannelKind, ModelPrice};
use saint_llm::CancellationToken;
use saint_scripted::llm::Reply;
use serde_json::json;

const WARMUP_CALLS: usize = 2_000;
const MEASURED_CALLS: usize = 20_000;
const CONCURRENT_CALLERS: usize = 200;
const WARMUP_TURNS: usize = 50;
const MEASURED_TURNS: usize = 500;

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let middle = values.len() / 2;
    if values.len().is_multiple_of(2) {
        f64::midpoint(values[middle - 1], values[middle])
    } else {
        values[middle]
    }
}

fn percentile(mut values: Vec<f64>, share: f64) -> f64 {
    values.sort_by(|a, b| a.partial_cmp(b).unwrap());
    values[((values.len() as f64 - 1.0) * share).round() as usize]
}

fn microseconds(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e6
}

const PRICE: ModelPrice = ModelPrice {
    input_per_mtok: 1.0,
    output_per_mtok: 5.0,
    per_audio_minute: None,
    per_million_characters: None,
};

/// A budget no call here reaches.
const ROOMY: Budget = Budget {
    usd: 1e12,
    period: BudgetPeriod::Month,
};

/// What `call_model` does for the budget around one call: the worst case, the
/// reservation (the store is read once per account, on the first call), the cost, the
/// settlement.
async fn one_call(ledger: &SpendLedger, person: &str) {
    let worst_case = budget::worst_case_usd(&PRICE, 3_000, 4_096);
    let mut reservation = ledger
        .reserve(
            person,
            &ROOMY,
            worst_case,
            jiff::Timestamp::now(),
            |_, _| async { Ok::<_, Infallible>(0.0) },
        )
        .await
        .unwrap()
        .unwrap();
    reservation.set_cost(worst_case / 2.0);
    reservation.settle(worst_case / 2.0, jiff::Timestamp::now());
}

/// Per call: reserve + settle for one person, one call at a time.
async fn sequential_calls() -> Vec<f64> {
    let ledger = SpendLedger::default();
    let mut samples = Vec::with_capacity(MEASURED_CALLS);
    for index in 0..WARMUP_CALLS + MEASURED_CALLS {
        let started = Instant::now();
        one_call(&ledger, "ivan").await;
        if index >= WARMUP_CALLS {
            samples.push(microseconds(started.elapsed()));
        }
    }
    samples
}

/// The same with no budget: the call path only checks that the role has none.
fn calls_without_budget() -> Vec<f64> {
    let role_budget: Option<Budget> = std::hint::black_box(None);
    let mut samples = Vec::with_capacity(MEASURED_CALLS);
    for index in 0..WARMUP_CALLS + MEASURED_CALLS {
        let started = Instant::now();
        if let Some(budget) = &role_budget {
            std::hint::black_box(budget);
        }
        if index >= WARMUP_CALLS {
            samples.push(microseconds(started.elapsed()));
        }
    }
    samples
}

/// Per call: reserve + settle while 200 tasks of the same person do the same on every
/// worker (all contend for the one lock).
async fn concurrent_calls() -> Vec<f64> {
    let ledger = SpendLedger::default();
    let calls_each = (WARMUP_CALLS + MEASURED_CALLS) / CONCURRENT_CALLERS;
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..CONCURRENT_CALLERS {
        let ledger = ledger.clone();
        tasks.spawn(async move {
            let mut samples = Vec::with_capacity(calls_each);
            for index in 0..calls_each {
                let started = Instant::now();
                one_call(&ledger, "marko").await;
                if index >= calls_each / 10 {
                    samples.push(microseconds(started.elapsed()));
                }
                tokio::task::yield_now().await;
            }
            samples
        });
    }
    let mut samples = Vec::new();
    while let Some(done) = tasks.join_next().await {
        samples.extend(done.unwrap());
    }
    samples
}

/// Agent overhead per model call (turn time minus model time) for Ivan on two bots
/// alike but for his role's budget, turns alternating between them.
async fn turns() -> (Vec<f64>, Vec<f64>) {
    let with_budget = InProcess::start_with(
        |config| config["roles"]["employee"]["budget"] = json!({"usd": 1e12, "period": "month"}),
        RuntimeOptions::default(),
    )
    .await;
    let without_budget = InProcess::start_with(
        |config| {
            config["roles"]["employee"]
                .as_object_mut()
                .unwrap()
                .remove("budget");
        },
        RuntimeOptions::default(),
    )
    .await;
    let (mut budgeted, mut unbudgeted) = (Vec::new(), Vec::new());
    for index in 0..WARMUP_TURNS + MEASURED_TURNS {
        for (bot, samples) in [
            (&with_budget, &mut budgeted),
            (&without_budget, &mut unbudgeted),
        ] {
            bot.llm.push(Reply::text("Sure, here you go."));
            let inbound = Inbound::direct(
                ChannelIdentity::parse(ChannelKind::Telegram, IVAN_TELEGRAM).expect("a user id"),
                format!("question number {index}"),
            );
            let started = Instant::now();
            let reply = bot
                .runtime
                .handle(inbound, None, CancellationToken::new())
                .await
                .unwrap();
            let overhead = started.elapsed().saturating_sub(reply.model_time);
            if index >= WARMUP_TURNS {
                samples.push(microseconds(overhead) / f64::from(reply.model_calls));
            }
        }
    }
    (budgeted, unbudgeted)
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let sequential = sequential_calls().await;
        let none = calls_without_budget();
        let concurrent = concurrent_calls().await;
        let (budgeted, unbudgeted) = turns().await;

        println!(
            "budget ledger benchmark ({MEASURED_CALLS} measured calls, {WARMUP_CALLS} warm-up; \
             {MEASURED_TURNS} measured turns per bot, {WARMUP_TURNS} warm-up; one run)"
        );
        println!();
        println!(
            "| per model call                                         | p50 µs   | p90 µs   |"
        );
        println!(
            "|--------------------------------------------------------|----------|----------|"
        );
        let row = |label: &str, values: &Vec<f64>| {
            println!(
                "| {label:<54} | {:>8.3} | {:>8.3} |",
                median(values.clone()),
                percentile(values.clone(), 0.9)
            );
        };
        row("no budget (the role has none)", &none);
        row(
            "ledger: worst case + reserve + settle, one caller",
            &sequential,
        );
        row(
            &format!("ledger: the same, {CONCURRENT_CALLERS} callers of one person at once"),
            &concurrent,
        );
        row("turn overhead per model call, no budget", &unbudgeted);
        row("turn overhead per model call, with a budget", &budgeted);
        println!();
        let added = median(sequential.clone()) - median(none.clone());
        let added_contended = median(concurrent.clone()) - median(none.clone());
        let added_turn = median(budgeted.clone()) - median(unbudgeted.clone());
        println!(
            "added per model call by the ledger: {added:.3} µs alone, {added_contended:.3} µs \
             with {CONCURRENT_CALLERS} callers of one person (target < 50 µs: {})",
            if added.max(added_contended) < 50.0 {
                "met"
            } else {
                "NOT met"
            }
        );
        println!(
            "difference of turn-overhead medians, budget vs none: {added_turn:.1} µs (turns \
             include an fsync per stored message, so this carries their noise)"
        );
    });
}

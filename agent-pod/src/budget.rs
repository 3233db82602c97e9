//! The budget ledger: every model call of a person — their turns on every channel,
//! their sub-agents, their scheduled runs, the heartbeat, compaction — draws on one
//! account per budget period. A call first reserves its worst case (the prompt's
//! estimated tokens at the input price plus the call's maximum output at the output
//! price) under one lock, and is refused when that does not fit what is left; after
//! the call its reservation settles to what the call really cost and the rest is
//! released. So however many calls of one person run at once, their spend passes the
//! budget by at most what one call costs beyond its reservation — nothing while the
//! prompt estimate holds — never by a call per concurrent child.
//!
//! The durable record stays the store's `spend` table: an account starts from it the
//! first time it is used in a process, and a call's cost is written there before its
//! reservation settles. Idle accounts are swept and re-read when next used.
//!
//! Bookkeeping only: the one I/O is the loader the caller passes to [`SpendLedger::reserve`].

use std::{collections::HashMap, future::Future, sync::Arc};

use jiff::Timestamp;
use saint_config::{Budget, BudgetPeriod, ModelPrice};

use crate::metering;
use parking_lot::{Mutex, MutexGuard};

/// Accounts kept before the idle ones are swept.
const SWEEP_AT: usize = 1_024;

/// A call's worst case in USD: `prompt_tokens` (an estimate; see
/// [`crate::runtime::estimate_tokens`]) at the input price plus every token of
/// `max_output_tokens` at the output price.
pub fn worst_case_usd(price: &ModelPrice, prompt_tokens: u64, max_output_tokens: u32) -> f64 {
    prompt_tokens as f64 * price.input_per_mtok / 1_000_000.0
        + f64::from(max_output_tokens) * price.output_per_mtok / 1_000_000.0
}

/// The call was refused: its worst case does not fit what is left of the budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OverBudget;

/// Every person's spend in their current budget periods, and the calls under way.
/// Cloning shares the ledger.
#[derive(Clone, Default)]
pub struct SpendLedger {
    state: Arc<Mutex<State>>,
}

#[derive(Default)]
struct State {
    /// Accounts by person (contact slug); one per budget period used.
    people: HashMap<String, Vec<Account>>,
    accounts: usize,
    /// Moves whenever spend may be in the store that no account holds (an account was
    /// swept, or a call settled into a period whose account is not loaded): an account
    /// loaded from a store read made before it moved is read again.
    epoch: u64,
}

struct Account {
    first_day: String,
    last_day: String,
    /// Spend of the period: the store's when loaded, plus every call settled since.
    settled: f64,
    /// Worst cases of the calls under way.
    reserved: f64,
    /// Calls under way; an account with none may be swept.
    open: u32,
}

impl State {
    fn account(&mut self, person: &str, first_day: &str, last_day: &str) -> Option<&mut Account> {
        self.people
            .get_mut(person)?
            .iter_mut()
            .find(|account| account.first_day == first_day && account.last_day == last_day)
    }

    fn insert(&mut self, person: &str, account: Account) {
        if self.accounts >= SWEEP_AT {
            self.people.retain(|_, accounts| {
                accounts.retain(|account| account.open > 0);
                !accounts.is_empty()
            });
            let kept = self.people.values().map(Vec::len).sum();
            if kept != self.accounts {
                self.epoch += 1;
            }
            self.accounts = kept;
        }
        self.people
            .entry(person.to_string())
            .or_default()
            .push(account);
        self.accounts += 1;
    }
}

impl SpendLedger {
    /// Reserves `worst_case` USD of `person`'s `budget` for the period containing `now`,
    /// or refuses when their settled spend, the calls under way and this one would pass
    /// it. The first use of a period's account reads its spend so far with `load(first
    /// day, last day)` (inclusive, `YYYY-MM-DD`).
    pub async fn reserve<E, Load, Loaded>(
        &self,
        person: &str,
        budget: &Budget,
        worst_case: f64,
        now: Timestamp,
        load: Load,
    ) -> Result<Result<Reservation, OverBudget>, E>
    where
        Load: Fn(String, String) -> Loaded,
        Loaded: Future<Output = Result<f64, E>>,
    {
        let (first_day, last_day) = metering::period_days(budget.period, now);
        loop {
            let epoch = {
                let mut state = self.lock();
                if let Some(account) = state.account(person, &first_day, &last_day) {
                    return Ok(self.take(account, person, budget, worst_case));
                }
                state.epoch
            };
            // Read outside the lock: other people's calls do not wait for the store.
            let settled = load(first_day.clone(), last_day.clone()).await?;
            let mut state = self.lock();
            if state.account(person, &first_day, &last_day).is_none() {
                if state.epoch != epoch {
                    continue;
                }
                state.insert(
                    person,
                    Account {
                        first_day: first_day.clone(),
                        last_day: last_day.clone(),
                        settled,
                        reserved: 0.0,
                        open: 0,
                    },
                );
            }
            // Another call may have loaded it meanwhile: its account is the one in force.
            let account = state
                .account(person, &first_day, &last_day)
                .expect("the account was just found or inserted");
            return Ok(self.take(account, person, budget, worst_case));
        }
    }

    fn take(
        &self,
        account: &mut Account,
        person: &str,
        budget: &Budget,
        worst_case: f64,
    ) -> Result<Reservation, OverBudget> {
        if account.settled + account.reserved + worst_case > budget.usd {
            return Err(OverBudget);
        }
        account.reserved += worst_case;
        account.open += 1;
        Ok(Reservation {
            state: self.state.clone(),
            person: person.to_string(),
            period: budget.period,
            first_day: account.first_day.clone(),
            last_day: account.last_day.clone(),
            worst_case,
            cost: None,
            open: true,
        })
    }

    /// Takes `usd` off what `person` is charged in the period of `budget` containing
    /// `now` (an approved top-up, already stored as a credit in the spend table): the
    /// loaded account at once; an account not loaded reads the credit from the store
    /// when it is (the epoch moves, so a load under way reads again).
    pub fn credit(&self, person: &str, budget: &Budget, usd: f64, now: Timestamp) {
        let (first_day, last_day) = metering::period_days(budget.period, now);
        let mut state = self.lock();
        match state.account(person, &first_day, &last_day) {
            Some(account) => account.settled -= usd,
            None => state.epoch += 1,
        }
    }

    /// What `person` has spent and holds reserved in the account of `first_day..=last_day`,
    /// if that account is loaded.
    pub fn spent_and_reserved(
        &self,
        person: &str,
        first_day: &str,
        last_day: &str,
    ) -> Option<(f64, f64)> {
        let mut state = self.lock();
        state
            .account(person, first_day, last_day)
            .map(|account| (account.settled, account.reserved))
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    // The state stays consistent between statements: a panic elsewhere leaves it usable.
    state.lock()
}

/// One call's place in a person's budget, from before the call until its cost is
/// stored. Dropped unsettled, it releases its worst case and records the cost given to
/// [`Reservation::set_cost`], if any: a turn stopped while storing its answer still
/// counts what the call spent.
pub struct Reservation {
    state: Arc<Mutex<State>>,
    person: String,
    period: BudgetPeriod,
    first_day: String,
    last_day: String,
    worst_case: f64,
    cost: Option<f64>,
    open: bool,
}

impl Reservation {
    /// The USD reserved.
    pub fn worst_case(&self) -> f64 {
        self.worst_case
    }

    /// The call's real cost is known (it is recorded even if the reservation is dropped).
    pub fn set_cost(&mut self, usd: f64) {
        self.cost = Some(usd);
    }

    /// Settles to `usd`, spent at `at` (the time its spend was stored under), and
    /// releases the rest of the reservation.
    pub fn settle(mut self, usd: f64, at: Timestamp) {
        self.finish(usd, at);
    }

    fn finish(&mut self, usd: f64, at: Timestamp) {
        if !std::mem::take(&mut self.open) {
            return;
        }
        let mut state = lock(&self.state);
        if let Some(account) = state.account(&self.person, &self.first_day, &self.last_day) {
            account.open -= 1;
            // Back to exactly zero when idle: sums of floats drift.
            account.reserved = if account.open == 0 {
                0.0
            } else {
                account.reserved - self.worst_case
            };
        }
        if usd == 0.0 {
            return;
        }
        // The spend belongs to the period it was stored in (a call that ran over
        // midnight on a period's last day counts in the next).
        let (first_day, last_day) = metering::period_days(self.period, at);
        match state.account(&self.person, &first_day, &last_day) {
            Some(account) => account.settled += usd,
            None => state.epoch += 1,
        }
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let cost = self.cost.unwrap_or(0.0);
        self.finish(cost, Timestamp::now());
    }
}

#[cfg(test)]
mod tests {
    use std::{convert::Infallible, time::Duration};

    use super::*;

    fn budget(usd: f64) -> Budget {
        Budget {
            usd,
            period: BudgetPeriod::Month,
        }
    }

    fn now() -> Timestamp {
        "2026-11-18T10:00:00Z".parse().unwrap()
    }

    async fn reserve(
        ledger: &SpendLedger,
        person: &str,
        usd: f64,
        worst_case: f64,
        stored: f64,
    ) -> Result<Reservation, OverBudget> {
        ledger
            .reserve(person, &budget(usd), worst_case, now(), |_, _| async move {
                Ok::<_, Infallible>(stored)
            })
            .await
            .unwrap()
    }

    #[test]
    fn the_worst_case_is_the_prompt_at_the_input_price_plus_all_output_at_the_output_price() {
        let price = ModelPrice {
            input_per_mtok: 3.0,
            output_per_mtok: 15.0,
            per_audio_minute: None,
            per_million_characters: None,
        };
        assert_eq!(worst_case_usd(&price, 1_000_000, 0), 3.0);
        assert_eq!(worst_case_usd(&price, 0, 4_096), 4_096.0 * 15.0 / 1e6);
    }

    #[tokio::test]
    async fn a_call_that_does_not_fit_what_is_left_is_refused_and_settling_frees_the_rest() {
        let ledger = SpendLedger::default();
        // 0.40 of 1.00 already stored for this month.
        let first = reserve(&ledger, "ana", 1.0, 0.5, 0.4).await.unwrap();
        assert_eq!(
            reserve(&ledger, "ana", 1.0, 0.2, 0.4).await.err(),
            Some(OverBudget),
            "0.40 spent + 0.50 reserved + 0.20 > 1.00"
        );
        // Someone else's account is their own.
        assert!(reserve(&ledger, "ivan", 1.0, 0.9, 0.0).await.is_ok());
        first.settle(0.1, now());
        let (first_day, last_day) = metering::period_days(BudgetPeriod::Month, now());
        assert_eq!(
            ledger.spent_and_reserved("ana", &first_day, &last_day),
            Some((0.5, 0.0))
        );
        let second = reserve(&ledger, "ana", 1.0, 0.5, 0.4).await.unwrap();
        assert_eq!(second.worst_case(), 0.5);
        // A dropped reservation releases its worst case; one whose cost was known
        // records that cost.
        drop(second);
        let mut third = reserve(&ledger, "ana", 1.0, 0.5, 0.4).await.unwrap();
        third.set_cost(0.25);
        drop(third);
        assert_eq!(
            ledger.spent_and_reserved("ana", &first_day, &last_day),
            Some((0.75, 0.0))
        );
    }

    #[tokio::test]
    async fn the_store_is_read_once_per_account() {
        let ledger = SpendLedger::default();
        let reads = Arc::new(std::sync::atomic::AtomicU32::new(0));
        for _ in 0..3 {
            let reads = reads.clone();
            ledger
                .reserve("ana", &budget(1.0), 0.1, now(), move |_, _| {
                    reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    async { Ok::<_, Infallible>(0.0) }
                })
                .await
                .unwrap()
                .unwrap()
                .settle(0.1, now());
        }
        assert_eq!(reads.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    /// 200 calls of one person at once, on every worker, each taking a while and
    /// costing a random share of its reservation: what they spend stays within the
    /// budget plus one reservation (here, within the budget: no call costs more than
    /// it reserved), and the budget is used, not refused early.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn two_hundred_concurrent_calls_at_the_edge_overshoot_by_at_most_one_reservation() {
        const BUDGET: f64 = 1.0;
        const WORST_CASE: f64 = 0.03;
        let ledger = SpendLedger::default();
        let spent = Arc::new(Mutex::new(0.0_f64));
        let mut calls = tokio::task::JoinSet::new();
        for index in 0..200_u32 {
            let (ledger, spent) = (ledger.clone(), spent.clone());
            calls.spawn(async move {
                // Already 0.50 of the budget spent before these calls.
                let reservation = ledger
                    .reserve("marko", &budget(BUDGET), WORST_CASE, now(), |_, _| async {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                        Ok::<_, Infallible>(0.5)
                    })
                    .await
                    .unwrap();
                let Ok(reservation) = reservation else {
                    return false;
                };
                tokio::time::sleep(Duration::from_millis(u64::from(index % 7) * 3)).await;
                let cost = WORST_CASE * f64::from(index % 10 + 1) / 10.0;
                *spent.lock() += cost;
                reservation.settle(cost, now());
                true
            });
        }
        let mut made = 0;
        while let Some(done) = calls.join_next().await {
            made += u32::from(done.unwrap());
        }
        let spent = 0.5 + *spent.lock();
        assert!(
            spent <= BUDGET + WORST_CASE,
            "spent {spent} with {made} calls made"
        );
        assert!(made >= 16, "0.50 left fits 16 worst cases at least: {made}");
        assert!(made < 200, "the budget stopped some calls");
        let (first_day, last_day) = metering::period_days(BudgetPeriod::Month, now());
        let (settled, reserved) = ledger
            .spent_and_reserved("marko", &first_day, &last_day)
            .unwrap();
        assert!((settled - spent).abs() < 1e-9, "{settled} vs {spent}");
        assert_eq!(reserved, 0.0);
    }

    #[tokio::test]
    async fn spend_stored_in_the_next_period_counts_there() {
        let ledger = SpendLedger::default();
        let daily = Budget {
            usd: 1.0,
            period: BudgetPeriod::Day,
        };
        let late: Timestamp = "2026-11-18T23:59:59Z".parse().unwrap();
        let after: Timestamp = "2026-11-19T00:00:01Z".parse().unwrap();
        let load = |_: String, _: String| async { Ok::<_, Infallible>(0.0) };
        let tomorrow = ledger
            .reserve("ana", &daily, 0.1, after, load)
            .await
            .unwrap()
            .unwrap();
        ledger
            .reserve("ana", &daily, 0.5, late, load)
            .await
            .unwrap()
            .unwrap()
            .settle(0.4, after);
        assert_eq!(
            ledger.spent_and_reserved("ana", "2026-11-18", "2026-11-18"),
            Some((0.0, 0.0))
        );
        assert_eq!(
            ledger.spent_and_reserved("ana", "2026-11-19", "2026-11-19"),
            Some((0.4, 0.1))
        );
        drop(tomorrow);
    }
}

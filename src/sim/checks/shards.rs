//! Merging a sharded hunt: the JSON summaries of `retrysim hunt --format
//! json`, one seed range each, into one verdict.
//!
//! A summary comes from a CI artifact or a hand: it is read as untrusted
//! input. [`parse_shard`] refuses, naming the file, anything that is not a
//! whole summary: JSON that does not parse, a range that is empty or runs
//! past the last seed, counts that are not whole numbers or disagree with
//! the findings listed, and findings that are not well-formed (each needs
//! `seed`, `kind`, `invariant`, `count`, `message` and `replay`, its seed in
//! the shard's range). [`merge_shards`] then refuses shards that overlap,
//! leave a gap, drew other scenarios, or whose counts sum past `u64::MAX`.
//! A summary file over [`MAX_SUMMARY_BYTES`] is refused before it is read.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

/// The largest shard summary `retrysim hunt --merge` reads: 64 MiB. A
/// summary takes about 300 bytes per finding, so this holds some 200,000
/// findings, far more than a shard of 10,000 seeds that all fail.
pub const MAX_SUMMARY_BYTES: u64 = 64 << 20;

/// One finding as a summary lists it (see
/// [`Finding`](crate::sim::checks::hunt::Finding)).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(expecting = "a finding: an object with seed, kind, invariant, count, message and replay")]
pub struct ShardFinding {
    /// The seed that shows it.
    pub seed: u64,
    /// The kind the seed ran (`fleet` or `single`).
    pub kind: String,
    /// The invariant or check it broke.
    pub invariant: String,
    /// How many violations of it the seed had.
    pub count: u64,
    /// The first one.
    pub message: String,
    /// The command that reproduces it.
    pub replay: String,
}

/// What a summary file holds, as read: the numbers are checked after.
#[derive(Deserialize)]
#[serde(expecting = "a hunt summary: an object with start, seeds_run and violations")]
struct SummaryFile {
    start: serde_json::Number,
    seeds_run: serde_json::Number,
    #[serde(default)]
    scenario_kind: serde_json::Value,
    #[serde(default)]
    sabotage: serde_json::Value,
    #[serde(default)]
    by_invariant: BTreeMap<String, serde_json::Number>,
    violations: Vec<ShardFinding>,
    #[serde(default)]
    interrupted: Option<String>,
}

/// One shard's summary, checked on its own.
#[derive(Debug, Clone, PartialEq)]
pub struct Shard {
    /// Its file's name, for the messages.
    pub name: String,
    /// Its first seed.
    pub start: u64,
    /// How many seeds it ran (at least one; `start + seeds_run - 1` fits in a `u64`).
    pub seeds_run: u64,
    scenario_kind: serde_json::Value,
    sabotage: serde_json::Value,
    by_invariant: BTreeMap<String, u64>,
    violations: Vec<ShardFinding>,
}

impl Shard {
    /// Its last seed.
    pub fn last(&self) -> u64 {
        self.start + (self.seeds_run - 1)
    }
}

/// Several shards' JSON summaries merged into one verdict.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Merged {
    /// The shards' ranges, `(start, seeds_run)`, sorted.
    pub shards: Vec<(u64, u64)>,
    /// The first seed of the whole range.
    pub start: u64,
    /// Seeds run over all shards.
    pub seeds_run: u64,
    /// What the shards drew (every shard must agree).
    pub scenario_kind: serde_json::Value,
    /// Deliberate defects turned on (every shard must agree).
    pub sabotage: serde_json::Value,
    /// Failing seeds per invariant or check, summed over the shards.
    pub by_invariant: BTreeMap<String, u64>,
    /// Every finding of every shard, sorted by seed, each with its replay line.
    pub violations: Vec<ShardFinding>,
}

/// A user's number in a message: at most 40 characters of it.
fn shown(n: &serde_json::Number) -> String {
    let text = n.to_string();
    match text.char_indices().nth(40) {
        Some((i, _)) => format!("{}...", &text[..i]),
        None => text,
    }
}

/// Reads one shard's summary (`name` is its file, for the messages) and
/// checks it on its own: an error says what is wrong with it.
pub fn parse_shard(name: &str, text: &[u8]) -> Result<Shard, String> {
    let file: SummaryFile =
        serde_json::from_slice(text).map_err(|e| format!("{name}: not a hunt summary (`hunt --format json`): {e}"))?;
    // A signal stops a hunt with seeds still running: what finished need
    // not be the range's first `seeds_run` seeds, so it covers no range.
    if let Some(line) = &file.interrupted {
        return Err(format!("{name}: an interrupted shard ({}); run that shard again", line.escape_debug()));
    }
    let seed = |key: &str, n: &serde_json::Number| {
        n.as_u64().ok_or_else(|| format!("{name}: {key} is {}, not a whole number from 0 to {}", shown(n), u64::MAX))
    };
    let start = seed("start", &file.start)?;
    let seeds_run = seed("seeds_run", &file.seeds_run)?;
    if seeds_run == 0 {
        return Err(format!("{name}: seeds_run is 0: a shard runs at least one seed"));
    }
    if start.checked_add(seeds_run - 1).is_none() {
        return Err(format!("{name}: start {start} with seeds_run {seeds_run} runs past the last seed, {}", u64::MAX));
    }
    let mut by_invariant = BTreeMap::new();
    for (key, n) in &file.by_invariant {
        let count = n.as_u64().filter(|&c| c <= seeds_run).ok_or_else(|| {
            format!(
                "{name}: by_invariant {:?} is {}, not a count of seeds from 0 to seeds_run ({seeds_run})",
                key.escape_debug().to_string(),
                shown(n)
            )
        })?;
        by_invariant.insert(key.clone(), count);
    }
    let shard = Shard {
        name: name.to_owned(),
        start,
        seeds_run,
        scenario_kind: file.scenario_kind,
        sabotage: file.sabotage,
        by_invariant,
        violations: file.violations,
    };
    check_findings(&shard)?;
    Ok(shard)
}

/// The findings of one shard: each in its range, counting at least one
/// violation, and as many of each invariant as `by_invariant` says.
fn check_findings(shard: &Shard) -> Result<(), String> {
    let name = &shard.name;
    let mut listed: BTreeMap<&str, u64> = BTreeMap::new();
    for (i, f) in shard.violations.iter().enumerate() {
        if f.seed < shard.start || f.seed > shard.last() {
            return Err(format!(
                "{name}: violations[{i}] is for seed {}, outside the shard's seeds {}..={}",
                f.seed,
                shard.start,
                shard.last()
            ));
        }
        if f.count == 0 {
            return Err(format!(
                "{name}: violations[{i}] (seed {}) has count 0: a finding counts at least one",
                f.seed
            ));
        }
        *listed.entry(f.invariant.as_str()).or_default() += 1;
    }
    let counted: BTreeMap<&str, u64> =
        shard.by_invariant.iter().filter(|(_, n)| **n > 0).map(|(k, n)| (k.as_str(), *n)).collect();
    if listed != counted {
        let keys: BTreeSet<&str> = listed.keys().chain(counted.keys()).copied().collect();
        let first = keys.into_iter().find(|k| listed.get(k) != counted.get(k)).unwrap_or_default();
        return Err(format!(
            "{name}: by_invariant counts {} failing seeds for {:?} but violations lists {}",
            counted.get(first).unwrap_or(&0),
            first.escape_debug().to_string(),
            listed.get(first).unwrap_or(&0)
        ));
    }
    Ok(())
}

/// Merges shards checked by [`parse_shard`]: an error names the shards
/// that overlap, leave a gap or drew other scenarios, and counts that sum
/// past `u64::MAX`.
pub fn merge_shards(mut shards: Vec<Shard>) -> Result<Merged, String> {
    if shards.is_empty() {
        return Err("no shard summaries to merge".into());
    }
    shards.sort_by_key(|s| s.start);
    let first = &shards[0];
    for s in &shards[1..] {
        if s.scenario_kind != first.scenario_kind || s.sabotage != first.sabotage {
            return Err(format!("{}: drew another scenario kind or sabotage than {}", s.name, first.name));
        }
    }
    for pair in shards.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        // `a.last()` is below `u64::MAX` when a shard follows it without overlap.
        let next = a.last().checked_add(1);
        if next != Some(b.start) {
            let how = if b.start <= a.last() { "overlap" } else { "leave a gap" };
            return Err(format!(
                "{} covers seeds {}..={} and {} covers {}..={}: the shards {how}",
                a.name,
                a.start,
                a.last(),
                b.name,
                b.start,
                b.last()
            ));
        }
    }
    let seeds_run = shards.iter().try_fold(0u64, |sum, s| sum.checked_add(s.seeds_run)).ok_or_else(|| {
        format!(
            "the shards cover seeds {}..={}, more than {} seeds in all",
            shards[0].start,
            shards[shards.len() - 1].last(),
            u64::MAX
        )
    })?;
    let mut merged = Merged {
        shards: shards.iter().map(|s| (s.start, s.seeds_run)).collect(),
        start: shards[0].start,
        seeds_run,
        scenario_kind: shards[0].scenario_kind.clone(),
        sabotage: shards[0].sabotage.clone(),
        by_invariant: BTreeMap::new(),
        violations: Vec::new(),
    };
    for s in shards {
        for (k, n) in s.by_invariant {
            // Each count is at most its shard's seeds, and the seeds sum: this cannot overflow.
            let total = merged.by_invariant.entry(k).or_default();
            *total = total.saturating_add(n);
        }
        merged.violations.extend(s.violations);
    }
    merged.violations.sort_by_key(|f| f.seed);
    Ok(merged)
}

/// Merges shard summaries (the JSON texts of `retrysim hunt --format
/// json`, each with its file's name): [`parse_shard`] on each, then
/// [`merge_shards`] (unit tests only: the command line reads files).
#[cfg(test)]
pub fn merge_summaries(shards: &[(String, String)]) -> Result<Merged, String> {
    let parsed = shards.iter().map(|(name, text)| parse_shard(name, text.as_bytes())).collect::<Result<_, _>>()?;
    merge_shards(parsed)
}

impl Merged {
    /// The seeds that failed, ascending.
    pub fn failing_seeds(&self) -> Vec<u64> {
        let seeds: BTreeSet<u64> = self.violations.iter().map(|v| v.seed).collect();
        seeds.into_iter().collect()
    }

    /// The verdict as text: the range, the shards, and every failing
    /// seed's finding with its replay line. What the shards wrote is shown
    /// with control characters escaped.
    pub fn text(&self) -> String {
        use std::fmt::Write as _;
        let mut out = String::new();
        // `merge_shards` checked the range fits.
        let last = self.start + self.seeds_run.saturating_sub(1);
        let failing = self.failing_seeds();
        let _ = writeln!(
            out,
            "hunt (merged {} shards): seeds {}..={last}, {} failing",
            self.shards.len(),
            self.start,
            failing.len()
        );
        if self.violations.is_empty() {
            let _ = write!(out, "no violations");
            return out;
        }
        let _ = writeln!(out, "violations by invariant (seeds):");
        for (inv, n) in &self.by_invariant {
            let _ = writeln!(out, "  {:<28} {n}", inv.escape_debug().to_string());
        }
        let _ = writeln!(out, "failing seeds:");
        for f in &self.violations {
            let _ = writeln!(
                out,
                "  seed {} [{}] {}: {}",
                f.seed,
                f.kind.escape_debug(),
                f.invariant.escape_debug(),
                f.message.escape_debug()
            );
            let _ = writeln!(out, "    replay: {}", f.replay.escape_debug());
        }
        out.pop();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(start: &str, seeds_run: &str, violations: &str) -> String {
        format!(
            r#"{{"start":{start},"seeds_run":{seeds_run},"scenario_kind":"all","sabotage":[],"by_invariant":{{}},"violations":{violations}}}"#
        )
    }

    fn finding(seed: u64) -> String {
        format!(
            r#"{{"seed":{seed},"kind":"fleet","invariant":"attempt-bound","count":2,"message":"m","replay":"retrysim hunt --seeds 1 --start {seed}"}}"#
        )
    }

    fn one(name: &str, text: &str) -> Result<Merged, String> {
        merge_summaries(&[(name.to_owned(), text.to_owned())])
    }

    fn refused(shards: &[(&str, &str)], expected: &str) {
        let shards: Vec<(String, String)> = shards.iter().map(|(n, t)| (n.to_string(), t.to_string())).collect();
        match merge_summaries(&shards) {
            Ok(m) => panic!("merged {shards:?} into {m:?}; expected an error with {expected:?}"),
            Err(e) => assert!(e.contains(expected), "expected {expected:?} in: {e}"),
        }
    }

    #[test]
    fn a_well_formed_summary_merges() {
        let text = summary("1", "3", &format!("[{}]", finding(2))).replace("{}", r#"{"attempt-bound":1}"#);
        let m = one("a.json", &text).unwrap();
        assert_eq!((m.start, m.seeds_run, m.failing_seeds()), (1, 3, vec![2]));
        assert!(m.text().starts_with("hunt (merged 1 shards): seeds 1..=3, 1 failing\n"), "{}", m.text());
        // The last seed is a seed: a shard may end on it.
        let last = one("z.json", &summary(&(u64::MAX - 1).to_string(), "2", "[]")).unwrap();
        assert_eq!(last.start + (last.seeds_run - 1), u64::MAX);
    }

    #[test]
    fn text_that_is_no_summary_is_refused_with_the_file() {
        refused(&[("a.json", "")], "a.json: not a hunt summary");
        refused(&[("a.json", "{\"start\":1")], "a.json: not a hunt summary");
        refused(&[("a.json", "[1,2]")], "expected a hunt summary");
        refused(&[("a.json", r#"{"start":1,"violations":[]}"#)], "missing field `seeds_run`");
        refused(&[("a.json", r#"{"start":"1","seeds_run":1,"violations":[]}"#)], "a.json: not a hunt summary");
    }

    #[test]
    fn start_and_seeds_run_must_be_a_range_of_seeds() {
        refused(
            &[("a.json", &summary("18446744073709551615", "5", "[]"))],
            "a.json: start 18446744073709551615 with seeds_run 5 runs past the last seed",
        );
        refused(
            &[("a.json", &summary("18446744073709551616", "5", "[]"))],
            "a.json: start is 1.8446744073709552e+19, not a whole number from 0 to 18446744073709551615",
        );
        refused(&[("a.json", &summary("-1", "5", "[]"))], "a.json: start is -1, not a whole number");
        refused(&[("a.json", &summary("1.5", "5", "[]"))], "a.json: start is 1.5, not a whole number");
        refused(&[("a.json", &summary("1", "0", "[]"))], "a.json: seeds_run is 0");
        refused(&[("a.json", &summary("1", "1e400", "[]"))], "a.json: not a hunt summary");
    }

    #[test]
    fn findings_must_be_well_formed() {
        refused(&[("a.json", &summary("1", "3", r#"[1,"x",null]"#))], "expected a finding: an object with seed");
        refused(&[("a.json", &summary("1", "3", "[{}]"))], "missing field `seed`");
        refused(&[("a.json", &summary("1", "3", "null"))], "a.json: not a hunt summary");
        refused(
            &[("a.json", &summary("1", "3", &format!("[{}]", finding(9))))],
            "a.json: violations[0] is for seed 9, outside the shard's seeds 1..=3",
        );
        let zero = finding(2).replace("\"count\":2", "\"count\":0");
        refused(&[("a.json", &summary("1", "3", &format!("[{zero}]")))], "has count 0");
    }

    #[test]
    fn counts_must_agree_with_the_findings() {
        // A finding by_invariant does not count, and a count with no finding.
        refused(
            &[("a.json", &summary("1", "3", &format!("[{}]", finding(2))))],
            "a.json: by_invariant counts 0 failing seeds for \"attempt-bound\" but violations lists 1",
        );
        let counted = summary("1", "3", "[]").replace("{}", r#"{"x":2}"#);
        refused(&[("a.json", &counted)], "by_invariant counts 2 failing seeds for \"x\" but violations lists 0");
        let past = summary("1", "3", "[]").replace("{}", r#"{"x":18446744073709551616}"#);
        refused(&[("a.json", &past)], "a.json: by_invariant \"x\" is 1.8446744073709552e+19");
        let more = summary("1", "3", "[]").replace("{}", r#"{"x":4}"#);
        refused(&[("a.json", &more)], "not a count of seeds from 0 to seeds_run (3)");
    }

    #[test]
    fn shards_must_be_contiguous_and_not_overlap() {
        let a = summary("1", "10", "[]");
        refused(
            &[("a.json", &a), ("b.json", &summary("5", "10", "[]"))],
            "a.json covers seeds 1..=10 and b.json covers 5..=14: the shards overlap",
        );
        refused(
            &[("a.json", &a), ("b.json", &summary("20", "10", "[]"))],
            "a.json covers seeds 1..=10 and b.json covers 20..=29: the shards leave a gap",
        );
        refused(&[("a.json", &a), ("a2.json", &a)], "the shards overlap");
        let other = summary("11", "10", "[]").replace("\"all\"", "\"fleet\"");
        refused(&[("a.json", &a), ("b.json", &other)], "b.json: drew another scenario kind or sabotage than a.json");
        let b = summary("11", "10", "[]");
        let m = merge_summaries(&[("b".into(), b), ("a".into(), a)]).unwrap();
        assert_eq!((m.start, m.seeds_run, m.shards.clone()), (1, 20, vec![(1, 10), (11, 10)]));
    }

    #[test]
    fn counts_that_sum_past_the_last_seed_are_refused() {
        // Two shards that together cover every seed, 0..=u64::MAX: 2^64 seeds.
        let half = 1u64 << 63;
        let a = summary("0", &half.to_string(), "[]");
        let b = summary(&half.to_string(), &half.to_string(), "[]");
        refused(&[("a.json", &a), ("b.json", &b)], "more than 18446744073709551615 seeds in all");
        // One seed fewer fits.
        let b = summary(&half.to_string(), &(half - 1).to_string(), "[]");
        let m = merge_summaries(&[("a".into(), a), ("b".into(), b)]).unwrap();
        assert_eq!(m.seeds_run, u64::MAX);
    }

    #[test]
    fn control_characters_in_a_finding_are_escaped_in_the_text() {
        let f = finding(2).replace("\"message\":\"m\"", "\"message\":\"a\\u001b[2Jb\"");
        let text = summary("1", "3", &format!("[{f}]")).replace("{}", r#"{"attempt-bound":1}"#);
        let out = one("a.json", &text).unwrap().text();
        assert!(!out.contains('\u{1b}'), "{out:?}");
        assert!(out.contains("a\\u{1b}[2Jb"), "{out}");
    }

    #[test]
    fn an_interrupted_shard_is_refused() {
        let text =
            summary("1", "3", "[]").replace("\"violations\"", "\"interrupted\":\"hunt: interrupted\",\"violations\"");
        refused(&[("a.json", &text)], "a.json: an interrupted shard");
    }
}

//! Pictures of a run: an SVG timeline a reviewer reads at a glance.
//!
//! A retry storm, a herd that retries in the same millisecond, or a pacing
//! gate that holds the fleet until the window resets shows at once in a
//! picture and only slowly in thousands of trace lines. [`Timeline`] is the
//! picture's data, built from a [`Report`]; [`Timeline::to_svg`] draws it.
//!
//! The data is the server's ledger (every request: when, from whom, what it
//! was answered) and the job records (how each job ended), which every run
//! keeps whole: runs that report figures only keep compact traces, so the
//! picture reads no trace. A wait is the gap between one attempt's answer
//! and the same job's next attempt as the server saw them (backoff and time
//! queued at a gate alike). Attempts that never reached the API (a
//! partition) have no mark: the fault's shaded span shows them.
//!
//! Bounded whatever the run's size: marks are counted into cells (a lane by
//! a column of virtual time), each cell one `<rect>` per outcome with its
//! count in `data-n`; lanes are grouped when there are more than
//! [`MAX_LANES`]; windows are merged when there are more than [`MAX_BARS`].
//! The same report gives the same bytes (no clock, no hash order).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use svg::Document;
use svg::node::element::{Group, Line, Rectangle, Style, Text, Title};

use crate::sim::run::job::job_of_label;
use crate::sim::run::runner::{JobOutcome, JobRecord, Report};
use crate::sim::world::api::{Arrival, ArrivalOutcome, LimiterKind};

/// The most lanes drawn; more workers share lanes.
pub const MAX_LANES: usize = 48;
/// Runs with one worker and at most this many jobs get a lane per job.
pub(crate) const JOB_LANES: u32 = 40;
/// The most limiter windows drawn as bars; more are merged.
pub const MAX_BARS: usize = 400;
/// The plot's width in SVG units: at most one column per unit.
const PLOT_W: f64 = 1000.0;
/// The most cells (lanes times columns): it bounds the file's size.
const MAX_CELLS: usize = 12_000;
const LEFT: f64 = 130.0;
const RIGHT: f64 = 20.0;
const PANEL_H: f64 = 90.0;
const LANE_H: f64 = 12.0;
const LANE_GAP: f64 = 2.0;

/// What a mark stands for: an attempt's outcome, or a job's end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Mark {
    /// Answered 2xx.
    Ok,
    /// Answered 429 by a rate limiter (or with another code).
    Limited,
    /// Answered 429 `queue_full`: the server's cap on requests running at once.
    QueueFull,
    /// Answered 429 for quota or credits.
    QuotaLimited,
    /// Answered 402, or refused (not 429) for quota or credits.
    Quota,
    /// Answered, and the network lost the answer.
    Lost,
    /// Never answered (the server went down while it ran).
    Transport,
    /// Any other answer (409, 4xx, 5xx).
    Other,
    /// A job's final give-up.
    GaveUp,
    /// A job the front end deferred (answered 202).
    Deferred,
}

impl Mark {
    /// Every mark, in drawing and legend order.
    pub const ALL: [Mark; 10] = [
        Mark::Ok,
        Mark::Limited,
        Mark::QueueFull,
        Mark::QuotaLimited,
        Mark::Quota,
        Mark::Lost,
        Mark::Transport,
        Mark::Other,
        Mark::GaveUp,
        Mark::Deferred,
    ];

    /// Whether it is an answer 429 (of any code): these add up to the report's `limited`.
    pub fn is_429(self) -> bool {
        matches!(self, Mark::Limited | Mark::QueueFull | Mark::QuotaLimited)
    }

    /// The `class` attribute of its `<rect>`s (tests count marks by it).
    pub fn class(self) -> &'static str {
        match self {
            Mark::Ok => "ok",
            Mark::Limited => "r429",
            Mark::QueueFull => "r429-queue",
            Mark::QuotaLimited => "r429-quota",
            Mark::Quota => "quota",
            Mark::Lost => "lost",
            Mark::Transport => "transport",
            Mark::Other => "other",
            Mark::GaveUp => "gaveup",
            Mark::Deferred => "deferred",
        }
    }

    fn legend(self) -> &'static str {
        match self {
            Mark::Ok => "2xx",
            Mark::Limited => "429",
            Mark::QueueFull => "429 queue full",
            Mark::QuotaLimited => "429 quota",
            Mark::Quota => "402 / quota",
            Mark::Lost => "answer lost",
            Mark::Transport => "no answer",
            Mark::Other => "other",
            Mark::GaveUp => "gave up",
            Mark::Deferred => "deferred",
        }
    }

    /// An arrival's mark. A 429 is a 429 even when its answer was lost, so
    /// the 429 marks are the report's `limited`.
    pub fn of_arrival(a: &Arrival) -> Mark {
        let code = a.code.as_deref().unwrap_or("").to_ascii_uppercase();
        let quota = code.contains("QUOTA") || code.contains("CREDIT");
        match a.status {
            429 if code == "QUEUE_FULL" => Mark::QueueFull,
            429 if quota => Mark::QuotaLimited,
            429 => Mark::Limited,
            _ if a.lost => Mark::Lost,
            402 => Mark::Quota,
            _ if quota => Mark::Quota,
            200..=299 => Mark::Ok,
            _ if a.status == 0 || a.outcome == ArrivalOutcome::Aborted => Mark::Transport,
            _ => Mark::Other,
        }
    }
}

/// One lane: a job, a worker, or a group of workers.
#[derive(Debug, Clone, Default)]
pub struct Lane {
    /// Its label, e.g. `job-3`, `w7`, `w0–w9`.
    pub label: String,
    /// Marks per (column, mark).
    pub cells: BTreeMap<(u32, Mark), u64>,
    /// Columns in which some job of the lane waited, as merged ranges.
    pub waits: Vec<(u32, u32)>,
}

/// Requests in one limiter window (or in several merged ones).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowBar {
    /// Where it starts, virtual ms.
    pub start_ms: u64,
    /// Where it ends, virtual ms.
    pub end_ms: u64,
    /// Requests of the budget it let through.
    pub allowed: u64,
    /// Requests of the budget answered 429.
    pub refused: u64,
    /// What the limiter allows in it.
    pub capacity: u64,
}

/// The limiter panel: requests per window against capacity.
#[derive(Debug, Clone, Default)]
pub struct Windows {
    /// What it counts, e.g. `writes per 1 s fixed window (limit 30)`.
    pub label: String,
    /// The bars, in time order.
    pub bars: Vec<WindowBar>,
}

/// A scheduled fault: a span, or an instant (`from_ms == to_ms`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FaultSpan {
    /// Its kind, e.g. `partition`; also its `class` (`fault-partition`).
    pub kind: &'static str,
    /// When it starts, virtual ms.
    pub from_ms: u64,
    /// When it heals, virtual ms.
    pub to_ms: u64,
}

/// The deadline of one job (the slowest), drawn as a line in its lane.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadline {
    /// The job.
    pub job: u32,
    /// Its lane.
    pub lane: usize,
    /// When it started, virtual ms.
    pub start_ms: u64,
    /// When its policy's deadline falls, virtual ms.
    pub at_ms: u64,
}

/// The picture of one run.
#[derive(Debug, Clone)]
pub struct Timeline {
    /// The heading: scenario, seed, policy and the main figures.
    pub title: String,
    /// The time axis runs from 0 to this, virtual ms.
    pub span_ms: u64,
    /// Columns across the plot.
    pub columns: u32,
    /// What a lane is: `job`, `worker` or `workers` (grouped).
    pub lane_unit: &'static str,
    /// The lanes, top to bottom.
    pub lanes: Vec<Lane>,
    /// The limiter panel.
    pub windows: Windows,
    /// Scheduled faults.
    pub faults: Vec<FaultSpan>,
    /// The slowest job's deadline.
    pub deadline: Option<Deadline>,
    /// Marks of each kind over all lanes.
    pub totals: BTreeMap<Mark, u64>,
}

/// The worker in a label such as `w3 job-17`.
fn worker_of_label(label: &str) -> Option<u32> {
    label.strip_prefix('w')?.split(' ').next()?.parse().ok()
}

/// The end of the time axis: the run's last moment, arrival or fault.
fn span_of(r: &Report) -> u64 {
    let last_arrival = r.ledger.arrivals.iter().map(|a| ms(a.answered_at.unwrap_or(a.at))).max().unwrap_or(0);
    let last_fault = r.scenario_config.faults.schedule.iter().map(|f| ms(f.fault.until().unwrap_or(f.at))).max();
    r.virtual_ms.max(last_arrival).max(last_fault.unwrap_or(0)).max(1)
}

fn ms(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Where lanes come from: a job or a worker number, and its lane.
struct LaneMap {
    per_job: bool,
    index: BTreeMap<u32, usize>,
}

impl LaneMap {
    fn of(&self, job: u32, worker: u32) -> Option<usize> {
        self.index.get(if self.per_job { &job } else { &worker }).copied()
    }
}

/// The lanes of `r`'s picture: one per job (`per_job`) or per worker, up
/// to [`MAX_LANES`] (neighbours share one beyond that), where each job or
/// worker goes, and how many share a lane.
fn lanes_of(r: &Report, per_job: bool) -> (Vec<Lane>, LaneMap, usize) {
    let mut keys: BTreeSet<u32> = BTreeSet::new();
    for rec in r.records.iter().chain(&r.deferred_records) {
        keys.insert(if per_job { rec.job } else { rec.worker });
    }
    for a in &r.ledger.arrivals {
        let key = if per_job { job_of_label(&a.client) } else { worker_of_label(&a.client) };
        keys.extend(key);
    }
    let group = keys.len().div_ceil(MAX_LANES).max(1);
    let keys: Vec<u32> = keys.into_iter().collect();
    let lanes: Vec<Lane> = keys
        .chunks(group)
        .map(|chunk| {
            let first = chunk[0];
            let last = chunk[chunk.len() - 1];
            let label = match (per_job, first == last) {
                (true, _) => format!("job-{first}"),
                (false, true) => format!("w{first}"),
                (false, false) => format!("w{first}–w{last}"),
            };
            Lane { label, ..Lane::default() }
        })
        .collect();
    let map = LaneMap { per_job, index: keys.iter().enumerate().map(|(i, &k)| (k, i / group)).collect() };
    (lanes, map, group)
}

/// The picture's title: the run and its figures.
fn title_of(r: &Report) -> String {
    format!(
        "{} · seed {} · {} · {} requests, {} answered 429, {} of {} jobs succeeded, {:.1} s",
        r.scenario,
        r.seed,
        r.policy,
        r.requests,
        r.limited,
        r.succeeded,
        r.jobs,
        r.virtual_ms as f64 / 1000.0
    )
}

/// The lanes being marked, and every mark counted.
struct Plot {
    lanes: Vec<Lane>,
    map: LaneMap,
    columns: u32,
    span_ms: u64,
    totals: BTreeMap<Mark, u64>,
}

impl Plot {
    /// The column of the instant `at` (virtual ms).
    fn column(&self, at: u64) -> u32 {
        ((u128::from(at) * u128::from(self.columns) / u128::from(self.span_ms)) as u32).min(self.columns - 1)
    }

    /// Counts `mark`, and draws it in `lane` (if it has one) at `at`.
    fn put(&mut self, lane: Option<usize>, at: u64, mark: Mark) {
        *self.totals.entry(mark).or_insert(0) += 1;
        if let Some(l) = lane {
            let column = self.column(at);
            *self.lanes[l].cells.entry((column, mark)).or_insert(0) += 1;
        }
    }

    /// Attempts, and the waits between one job's attempts.
    fn attempts(&mut self, r: &Report) {
        let mut previous: BTreeMap<&str, u64> = BTreeMap::new();
        let mut waits: Vec<BTreeSet<(u32, u32)>> = vec![BTreeSet::new(); self.lanes.len()];
        for a in &r.ledger.arrivals {
            let job = job_of_label(&a.client).unwrap_or(0);
            let lane = self.map.of(job, worker_of_label(&a.client).unwrap_or(0));
            let at = ms(a.at);
            self.put(lane, at, Mark::of_arrival(a));
            if let (Some(l), Some(&from)) = (lane, previous.get(a.client.as_str()))
                && at > from
            {
                waits[l].insert((self.column(from), self.column(at)));
            }
            previous.insert(a.client.as_str(), ms(a.answered_at.unwrap_or(a.at)));
        }
        for (lane, ranges) in self.lanes.iter_mut().zip(waits) {
            lane.waits = merge(ranges);
        }
    }

    /// How jobs ended: a final give-up where the last run ended, a deferral
    /// where the front end let go.
    fn endings(&mut self, r: &Report) {
        let mut last_run: BTreeMap<u32, &JobRecord> = BTreeMap::new();
        for d in &r.deferred_records {
            last_run.insert(d.job, d);
        }
        for rec in &r.records {
            if last_run.contains_key(&rec.job) {
                self.put(self.map.of(rec.job, rec.worker), rec.finished_ms, Mark::Deferred);
            }
            let end = last_run.get(&rec.job).copied().unwrap_or(rec);
            if matches!(end.outcome, JobOutcome::GaveUp { .. }) {
                self.put(self.map.of(end.job, end.worker), end.finished_ms, Mark::GaveUp);
            }
        }
    }

    /// The deadline of the job that took longest (the first such job).
    fn longest_job(&self, r: &Report) -> Option<Deadline> {
        let rec = r.records.iter().max_by_key(|rec| (rec.finished_ms - rec.started_ms, std::cmp::Reverse(rec.job)))?;
        Some(Deadline {
            job: rec.job,
            lane: self.map.of(rec.job, rec.worker)?,
            start_ms: rec.started_ms,
            at_ms: rec.started_ms.saturating_add(ms(r.scenario_config.policy.deadline)),
        })
    }
}

impl Timeline {
    /// The picture of `r`.
    pub fn of_report(r: &Report) -> Timeline {
        let s = &r.scenario_config;
        let span_ms = span_of(r);
        let per_job = s.fleet.workers == 1 && s.fleet.jobs <= JOB_LANES;
        let (lanes, map, group) = lanes_of(r, per_job);
        let columns = (MAX_CELLS / lanes.len().max(1)).clamp(100, PLOT_W as usize) as u32;
        let mut plot = Plot { lanes, map, columns, span_ms, totals: BTreeMap::new() };
        plot.attempts(r);
        plot.endings(r);
        let deadline = plot.longest_job(r);
        Timeline {
            title: title_of(r),
            span_ms,
            columns,
            lane_unit: match (per_job, group) {
                (true, _) => "job",
                (false, 1) => "worker",
                (false, _) => "workers",
            },
            lanes: plot.lanes,
            windows: windows(r, span_ms),
            faults: faults(r),
            deadline,
            totals: plot.totals,
        }
    }

    /// The picture as SVG text.
    pub fn to_svg(&self) -> String {
        let lanes_h = self.lanes.len() as f64 * (LANE_H + LANE_GAP);
        let lanes_top = 40.0 + PANEL_H + 30.0;
        let axis_y = lanes_top + lanes_h + 4.0;
        let height = axis_y + 50.0;
        let x = Scale { span_ms: self.span_ms };
        let mut doc = document(height, &self.title);
        doc = doc.add(panel(&self.windows, 40.0, scale_top(&self.windows.bars), x));

        let mut body = Group::new().set("class", "lanes");
        for f in &self.faults {
            body = body.add(fault_span(f, lanes_top - 4.0, lanes_h + 4.0, x));
        }
        let cell_w = PLOT_W / f64::from(self.columns);
        for (i, lane) in self.lanes.iter().enumerate() {
            let y = lanes_top + i as f64 * (LANE_H + LANE_GAP);
            let mut g = Group::new().add(text(LEFT - 6.0, y + LANE_H - 2.0, &lane.label).set("text-anchor", "end"));
            for &(from, to) in &lane.waits {
                g = g.add(rect(
                    "wait",
                    LEFT + f64::from(from) * cell_w,
                    y + LANE_H / 2.0 - 1.0,
                    f64::from(to - from + 1) * cell_w,
                    2.0,
                ));
            }
            // A cell's attempts stack in proportion to their counts; ends sit in the lane's lower strip.
            let mut col_totals: BTreeMap<u32, u64> = BTreeMap::new();
            for (&(col, mark), &n) in &lane.cells {
                if mark < Mark::GaveUp {
                    *col_totals.entry(col).or_insert(0) += n;
                }
            }
            let mut stacked: BTreeMap<u32, f64> = BTreeMap::new();
            for (&(col, mark), &n) in &lane.cells {
                let cx = LEFT + f64::from(col) * cell_w;
                let r = if mark >= Mark::GaveUp {
                    let dy = if mark == Mark::GaveUp { LANE_H - 4.0 } else { 0.0 };
                    rect(mark.class(), cx, y + dy, cell_w.max(4.0), 4.0)
                } else {
                    let h = (LANE_H - 2.0) * n as f64 / col_totals[&col] as f64;
                    let below = stacked.entry(col).or_insert(0.0);
                    let r = rect(mark.class(), cx, y + 1.0 + *below, cell_w.max(2.0), h);
                    *below += h;
                    r
                };
                g = g.add(r.set("data-n", n));
            }
            body = body.add(g);
        }
        let mut head = format!("attempts by {} (grey: waiting)", self.lane_unit);
        if let Some(d) = self.deadline {
            if d.at_ms <= self.span_ms {
                let y = lanes_top + d.lane as f64 * (LANE_H + LANE_GAP);
                let dx = x.at(d.at_ms);
                let label = format!("job-{} deadline ({:.1} s)", d.job, d.at_ms as f64 / 1000.0);
                body = body
                    .add(line("deadline", dx, y - 3.0, dx, y + LANE_H + 3.0))
                    .add(line("start", x.at(d.start_ms), y - 3.0, x.at(d.start_ms), y + LANE_H + 3.0))
                    .add(match dx < LEFT + PLOT_W / 2.0 {
                        true => text(dx + 4.0, y - 4.0, &label).set("class", "note"),
                        false => text(dx - 4.0, y - 4.0, &label).set("class", "note").set("text-anchor", "end"),
                    });
            } else {
                let _ = write!(
                    head,
                    "; the slowest job, job-{}, has its deadline at {:.1} s, beyond the axis",
                    d.job,
                    d.at_ms as f64 / 1000.0
                );
            }
        }
        doc = doc.add(text(8.0, lanes_top - 10.0, &head).set("class", "head"));
        doc = doc.add(body).add(axis(axis_y, x)).add(legend(height - 12.0, &self.totals));
        doc.to_string()
    }
}

/// Sorted, merged column ranges: overlapping or touching ones join.
fn merge(ranges: BTreeSet<(u32, u32)>) -> Vec<(u32, u32)> {
    let mut out: Vec<(u32, u32)> = Vec::new();
    for (a, b) in ranges {
        match out.last_mut() {
            Some(last) if a <= last.1 + 1 => last.1 = last.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

/// The limiter panel's data: the budget most requests drew on (writes or
/// reads) of the busiest account, counted per window. A fixed window starts
/// at the account's first hit, as the limiter does; the other kinds are
/// shown on windows from time zero.
pub fn windows(r: &Report, span_ms: u64) -> Windows {
    let cfg = &r.scenario_config.api.limiter;
    let writes = r.ledger.arrivals.iter().filter(|a| a.method != "GET").count();
    let reads_budget = writes * 2 < r.ledger.arrivals.len();
    let mut per_account: BTreeMap<Option<&str>, usize> = BTreeMap::new();
    for a in &r.ledger.arrivals {
        *per_account.entry(a.account.as_deref()).or_insert(0) += 1;
    }
    let account = per_account.iter().max_by_key(|&(name, n)| (*n, std::cmp::Reverse(*name))).map(|(name, _)| *name);
    let hits: Vec<&Arrival> = r
        .ledger
        .arrivals
        .iter()
        .filter(|a| (a.method == "GET") == reads_budget && Some(a.account.as_deref()) == account)
        .collect();
    let limit = u64::from(if reads_budget { cfg.reads } else { cfg.writes });
    let window = cfg.window_ms.max(1);
    let kind = match cfg.kind {
        LimiterKind::FixedWindow => "fixed window",
        LimiterKind::TokenBucket => "token bucket",
        LimiterKind::SlidingWindow => "sliding window",
        LimiterKind::MovingWindow => "moving window",
        LimiterKind::LeakyBucket => "leaky bucket",
    };
    let mut bars: Vec<WindowBar> = Vec::new();
    let fixed = cfg.kind == LimiterKind::FixedWindow;
    if !fixed {
        let n = span_ms.div_ceil(window);
        bars = (0..n)
            .map(|k| WindowBar {
                start_ms: k * window,
                end_ms: (k + 1) * window,
                allowed: 0,
                refused: 0,
                capacity: limit,
            })
            .collect();
    }
    for a in &hits {
        let at = ms(a.at);
        let bar = if fixed {
            if bars.last().is_none_or(|b| at >= b.end_ms) {
                bars.push(WindowBar { start_ms: at, end_ms: at + window, allowed: 0, refused: 0, capacity: limit });
            }
            bars.last_mut()
        } else {
            bars.get_mut((at / window) as usize)
        };
        if let Some(b) = bar {
            if a.status == 429 { b.refused += 1 } else { b.allowed += 1 }
        }
    }
    let group = bars.len().div_ceil(MAX_BARS).max(1);
    let bars: Vec<WindowBar> = bars
        .chunks(group)
        .map(|c| WindowBar {
            start_ms: c[0].start_ms,
            end_ms: c[c.len() - 1].end_ms,
            allowed: c.iter().map(|b| b.allowed).sum(),
            refused: c.iter().map(|b| b.refused).sum(),
            capacity: c.iter().map(|b| b.capacity).sum(),
        })
        .collect();
    let merged = if group > 1 { format!(", {group} windows a bar") } else { String::new() };
    Windows {
        label: format!(
            "{} per {} {kind} (limit {limit}){merged}: let through, answered 429, capacity",
            if reads_budget { "reads" } else { "writes" },
            humantime::format_duration(std::time::Duration::from_millis(window)),
        ),
        bars,
    }
}

fn faults(r: &Report) -> Vec<FaultSpan> {
    r.scenario_config
        .faults
        .schedule
        .iter()
        .map(|f| {
            let from_ms = ms(f.at);
            let to_ms = f.fault.until().map_or(from_ms, |u| ms(u).max(from_ms));
            let kind = f.fault.kind().label();
            FaultSpan { kind, from_ms, to_ms }
        })
        .collect()
}

/// Virtual ms to an x coordinate.
#[derive(Clone, Copy)]
struct Scale {
    span_ms: u64,
}

impl Scale {
    fn at(self, ms: u64) -> f64 {
        LEFT + PLOT_W * ms as f64 / self.span_ms as f64
    }
}

/// One decimal: short and the same on every machine.
fn num(v: f64) -> String {
    let s = format!("{v:.1}");
    s.strip_suffix(".0").map(str::to_owned).unwrap_or(s)
}

fn rect(class: &str, x: f64, y: f64, w: f64, h: f64) -> Rectangle {
    Rectangle::new().set("class", class).set("x", num(x)).set("y", num(y)).set("width", num(w)).set("height", num(h))
}

fn line(class: &str, x1: f64, y1: f64, x2: f64, y2: f64) -> Line {
    Line::new().set("class", class).set("x1", num(x1)).set("y1", num(y1)).set("x2", num(x2)).set("y2", num(y2))
}

fn text(x: f64, y: f64, content: &str) -> Text {
    Text::new(content).set("x", num(x)).set("y", num(y))
}

const STYLE: &str = "text{font:11px sans-serif;fill:#222}.head{font-weight:bold}.over{font-weight:bold;fill:#fff}.note{font-size:10px;fill:#b00}\
.ok,.bar-ok{fill:#2a9d4b}.r429,.bar-429{fill:#e63946}.r429-queue{fill:#9d0208}.r429-quota{fill:#f3722c}.quota{fill:#f4a261}.lost{fill:#7b2cbf}.transport{fill:#555}.other{fill:#457b9d}\
.gaveup{fill:#000}.deferred{fill:#c77dff}.wait{fill:#bbb}.cap{stroke:#000;stroke-width:1.5}.edge{stroke:#ccc;stroke-width:.5}\
.tick{stroke:#888}.deadline{stroke:#b00;stroke-width:2;stroke-dasharray:3 2}.start{stroke:#b00;stroke-width:1}\
.fault{fill-opacity:.15}.fault-partition,.fault-limiter-partition{fill:#d00}.fault-hold{fill:#f80}\
.fault-latency{fill:#fc0}.fault-bounce,.fault-lose-answer{fill:#000;fill-opacity:.4}";

fn document(height: f64, title: &str) -> Document {
    let width = LEFT + PLOT_W + RIGHT;
    Document::new()
        .set("viewBox", format!("0 0 {} {}", num(width), num(height)))
        .set("width", num(width))
        .set("height", num(height))
        .add(Style::new(STYLE))
        .add(rect("bg", 0.0, 0.0, width, height).set("fill", "#fff"))
        .add(text(8.0, 18.0, title).set("class", "head"))
}

/// The top of the panel's scale: the fullest window, but at most twice the
/// largest capacity, so a storm of thousands does not flatten the rest (a
/// bar cut at the top has its count written on it).
fn scale_top(bars: &[WindowBar]) -> u64 {
    let fullest = bars.iter().map(|b| b.allowed + b.refused).max().unwrap_or(0);
    let capacity = bars.iter().map(|b| b.capacity).max().unwrap_or(0);
    match capacity {
        0 => fullest.max(1),
        c => fullest.clamp(c, 2 * c),
    }
}

/// Requests per window against capacity, with the window boundaries.
fn panel(w: &Windows, top: f64, max: u64, x: Scale) -> Group {
    let max = max.max(1) as f64;
    let base = top + PANEL_H;
    let mut g = Group::new().set("class", "panel").add(text(8.0, top + 6.0, &w.label));
    g = g.add(line("tick", LEFT, base, LEFT + PLOT_W, base));
    g = g.add(text(LEFT - 6.0, top + 18.0, &max.to_string()).set("text-anchor", "end"));
    let edges = w.bars.len() <= 200;
    for b in &w.bars {
        let (x0, x1) = (x.at(b.start_ms), x.at(b.end_ms).min(LEFT + PLOT_W));
        let width = (x1 - x0).max(0.5);
        let full = PANEL_H - 12.0;
        let h_ok = (full * b.allowed as f64 / max).min(full);
        let h_429 = (full * b.refused as f64 / max).min(full - h_ok);

        if edges {
            g = g.add(line("edge", x0, top + 10.0, x0, base));
        }
        if b.allowed > 0 {
            g = g.add(rect("bar-ok", x0, base - h_ok, width, h_ok).set("data-n", b.allowed));
        }
        if b.refused > 0 {
            g = g.add(rect("bar-429", x0, base - h_ok - h_429, width, h_429).set("data-n", b.refused));
        }
        let cap_y = base - (PANEL_H - 12.0) * b.capacity as f64 / max;
        g = g.add(line("cap", x0, cap_y, x0 + width, cap_y));
        if (b.allowed + b.refused) as f64 > max {
            let count = (b.allowed + b.refused).to_string();
            g = g.add(text(x0 + 3.0, top + 24.0, &count).set("class", "over"));
        }
    }
    g
}

fn fault_span(f: &FaultSpan, top: f64, height: f64, x: Scale) -> Group {
    let x0 = x.at(f.from_ms);
    let width = (x.at(f.to_ms) - x0).max(2.0);
    let class = format!("fault fault-{}", f.kind);
    let span = format!("{} {:.1}–{:.1} s", f.kind, f.from_ms as f64 / 1000.0, f.to_ms as f64 / 1000.0);
    Group::new()
        .add(rect(&class, x0, top, width, height).add(Title::new(span)))
        .add(text(x0 + 2.0, top - 2.0, f.kind).set("class", "note"))
}

/// The time axis, in seconds, with round steps.
fn axis(y: f64, x: Scale) -> Group {
    let span = x.span_ms;
    let step = [1u64, 2, 5]
        .iter()
        .flat_map(|&m| (0..12).map(move |e| m * 10u64.pow(e)))
        .filter(|&s| span / s <= 10)
        .min()
        .unwrap_or(span);
    let mut g = Group::new().set("class", "axis").add(line("tick", LEFT, y, LEFT + PLOT_W, y));
    let mut t = 0;
    while t <= span {
        let tx = x.at(t);
        let label = if step < 1000 { format!("{:.1} s", t as f64 / 1000.0) } else { format!("{} s", t / 1000) };
        g = g.add(line("tick", tx, y, tx, y + 4.0)).add(text(tx, y + 16.0, &label).set("text-anchor", "middle"));
        t += step;
    }
    g.add(text(LEFT - 20.0, y + 16.0, "virtual time").set("text-anchor", "end"))
}

fn legend(y: f64, totals: &BTreeMap<Mark, u64>) -> Group {
    let mut g = Group::new().set("class", "legend");
    let mut lx = LEFT;
    for m in Mark::ALL {
        let n = totals.get(&m).copied().unwrap_or(0);
        let label = format!("{} {n}", m.legend());
        g = g.add(rect(&format!("key {}", m.class()), lx, y - 9.0, 10.0, 10.0)).add(text(lx + 14.0, y, &label));
        lx += 24.0 + 7.0 * label.chars().count() as f64;
    }
    g
}

/// `compare --svg`: the limiter panel of each row's run, stacked on one
/// time axis and one scale, the ideal row first.
#[cfg(feature = "cli")]
pub fn compare_svg(preset: &str, seed: u64, rows: &[(String, &Report)]) -> String {
    let mut rows: Vec<&(String, &Report)> = rows.iter().collect();
    rows.sort_by_key(|(_, r)| r.scenario_config.fleet.gate != crate::sim::run::scenario::GateConfig::Ideal);
    let span_ms = rows.iter().map(|(_, r)| span_of(r)).max().unwrap_or(1);
    let panels: Vec<(String, Windows)> = rows
        .iter()
        .map(|(name, r)| {
            let w = windows(r, span_ms);
            let label = format!(
                "{name}: {} requests, {} answered 429, {} of {} jobs succeeded, {:.1} s",
                r.requests,
                r.limited,
                r.succeeded,
                r.jobs,
                r.virtual_ms as f64 / 1000.0
            );
            (label, w)
        })
        .collect();
    let all: Vec<WindowBar> = panels.iter().flat_map(|(_, w)| w.bars.iter().copied()).collect();
    let max = scale_top(&all);
    let step = PANEL_H + 24.0;
    let axis_y = 40.0 + panels.len() as f64 * step;
    let budget = panels.first().map(|(_, w)| w.label.clone()).unwrap_or_default();
    let mut title = String::new();
    let _ = write!(title, "compare {preset} · seed {seed} · {budget}");
    let mut doc = document(axis_y + 40.0, &title);
    for (i, (label, w)) in panels.iter().enumerate() {
        let w = Windows { label: label.clone(), bars: w.bars.clone() };
        doc = doc.add(panel(&w, 40.0 + i as f64 * step, max, Scale { span_ms }));
    }
    doc.add(axis(axis_y, Scale { span_ms })).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_joins_touching_ranges() {
        let ranges: BTreeSet<(u32, u32)> = [(1, 3), (4, 6), (9, 9), (2, 5)].into_iter().collect();
        assert_eq!(merge(ranges), vec![(1, 6), (9, 9)]);
    }

    #[test]
    fn labels_name_their_worker() {
        assert_eq!(worker_of_label("w12 job-3"), Some(12));
        assert_eq!(worker_of_label("(unknown)"), None);
    }

    #[test]
    fn numbers_are_short() {
        assert_eq!(num(3.0), "3");
        assert_eq!(num(2.26), "2.3");
    }
}

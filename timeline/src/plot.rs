//! The timeline as an SVG Gantt chart (plotters): one row per track (the head's at the top,
//! then each worker's), time in milliseconds across, spans coloured by category, each failure
//! a red line over every row with the rank it took, each recovery a shaded band.

use crate::{Cat, TraceFile};
use plotters::prelude::*;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use thiserror::Error;

/// The picture could not be drawn.
#[derive(Debug, Error)]
#[error("cannot draw {path}: {why}")]
pub struct PlotError {
    path: String,
    why: String,
}

/// What was drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Drawn {
    /// Rows (tracks).
    pub rows: usize,
    /// Rectangles (spans closer than a pixel on one row are drawn as one).
    pub boxes: usize,
    /// Failures marked.
    pub failures: usize,
}

fn colour(c: Cat) -> RGBColor {
    match c {
        Cat::Call => RGBColor(150, 150, 150),
        Cat::Kernel => RGBColor(31, 119, 180),
        Cat::Rerun => RGBColor(148, 103, 189),
        Cat::Submit => RGBColor(44, 160, 44),
        Cat::Retrieve => RGBColor(255, 127, 14),
        Cat::Exchange => RGBColor(23, 190, 207),
        Cat::Checkpoint => RGBColor(140, 86, 75),
        Cat::CheckpointFlush => RGBColor(196, 156, 148),
        Cat::Recovery => RGBColor(227, 119, 194),
        Cat::Failure => RGBColor(214, 39, 40),
    }
}

/// Draw `t` into `out` (SVG), `width` pixels wide, titled `title`.
pub fn plot(t: &TraceFile, out: &Path, width: u32, title: &str) -> Result<Drawn, PlotError> {
    let fail = |why: String| PlotError { path: out.display().to_string(), why };
    // Rows: every track that has an event or a name, in (rank, track) order.
    let mut rows: BTreeSet<(i64, i64)> = t.trace_events.iter().filter(|e| e.ph != "M").filter_map(|e| Some((e.pid, e.tid?))).collect();
    rows.extend(t.trace_events.iter().filter(|e| e.ph == "M" && e.name == "thread_name").filter_map(|e| Some((e.pid, e.tid?))));
    // Drawn from the bottom up: the head's tracks at the top.
    let rows: Vec<(i64, i64)> = rows.into_iter().rev().collect();
    if rows.is_empty() {
        return Err(fail("the trace has no events".into()));
    }
    let row_of: BTreeMap<(i64, i64), usize> = rows.iter().enumerate().map(|(i, &k)| (k, i)).collect();
    let labels: Vec<String> = rows
        .iter()
        .map(|&(pid, tid)| {
            let p = t.name_of(pid, None).map_or_else(|| format!("rank {pid}"), str::to_string);
            let th = t.name_of(pid, Some(tid)).map_or_else(|| format!("track {tid}"), str::to_string);
            format!("{p}: {th}")
        })
        .collect();
    let end_us = t
        .trace_events
        .iter()
        .filter(|e| e.ph != "M")
        .filter_map(|e| Some(e.ts? + e.dur.unwrap_or(0.0)))
        .fold(0f64, f64::max);
    let end_ms = (end_us / 1e3).max(1e-3) * 1.02;
    let height = 120 + 22 * rows.len() as u32;
    let root = SVGBackend::new(out, (width, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(e.to_string()))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(260)
        .build_cartesian_2d(0f64..end_ms, (0..rows.len()).into_segmented())
        .map_err(|e| fail(e.to_string()))?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(rows.len())
        .y_label_formatter(&|v| match v {
            SegmentValue::CenterOf(i) => labels.get(*i).cloned().unwrap_or_default(),
            _ => String::new(),
        })
        .x_desc("milliseconds since the plugin started")
        .draw()
        .map_err(|e| fail(e.to_string()))?;
    // A pixel's worth of time: spans of one row and category closer than that are one box.
    let px_ms = end_ms / f64::from(width.saturating_sub(300).max(1));
    let mut boxes = 0;
    let mut failures = 0;
    for cat in Cat::ALL {
        let mut per_row: BTreeMap<usize, Vec<(f64, f64)>> = BTreeMap::new();
        for e in t.of(cat).filter(|e| e.ph == "X") {
            let (Some(ts), Some(dur), Some(tid)) = (e.ts, e.dur, e.tid) else { continue };
            let Some(&row) = row_of.get(&(e.pid, tid)) else { continue };
            per_row.entry(row).or_default().push((ts / 1e3, (ts + dur) / 1e3));
        }
        let mut merged: Vec<(usize, f64, f64)> = Vec::new();
        for (row, mut spans) in per_row {
            spans.sort_by(|a, b| a.0.total_cmp(&b.0));
            let mut cur: Option<(f64, f64)> = None;
            for (a, b) in spans {
                cur = match cur {
                    Some((ca, cb)) if a - cb < px_ms => Some((ca, cb.max(b))),
                    Some(done) => {
                        merged.push((row, done.0, done.1));
                        Some((a, b))
                    }
                    None => Some((a, b)),
                };
            }
            merged.extend(cur.map(|(a, b)| (row, a, b)));
        }
        let col = colour(cat);
        if cat == Cat::Recovery {
            // A band over every row: offloading was held.
            chart
                .draw_series(merged.iter().map(|&(_, a, b)| {
                    Rectangle::new([(a, SegmentValue::Exact(0)), (b.max(a + px_ms), SegmentValue::Exact(rows.len()))], col.mix(0.18).filled())
                }))
                .map_err(|e| fail(e.to_string()))?;
        }
        if cat == Cat::Failure {
            let marks: Vec<(f64, String)> = t
                .of(cat)
                .filter_map(|e| Some((e.ts? / 1e3, e.args.as_ref()?.get("rank")?.as_i64()?)))
                .map(|(at, r)| (at, format!("rank {r} failed")))
                .collect();
            failures = marks.len();
            if marks.is_empty() {
                continue;
            }
            chart
                .draw_series(marks.iter().map(|(at, _)| {
                    PathElement::new(vec![(*at, SegmentValue::Exact(0)), (*at, SegmentValue::Exact(rows.len()))], col.stroke_width(2))
                }))
                .map_err(|e| fail(e.to_string()))?
                .label("failure")
                .legend(move |(x, y)| PathElement::new(vec![(x, y - 6), (x, y + 6)], col.stroke_width(2)));
            chart
                .draw_series(marks.iter().map(|(at, text)| {
                    Text::new(text.clone(), (*at + px_ms * 3.0, SegmentValue::Exact(rows.len() - 1)), ("sans-serif", 13).into_font().color(&col))
                }))
                .map_err(|e| fail(e.to_string()))?;
            continue;
        }
        if merged.is_empty() {
            continue;
        }
        boxes += merged.len();
        chart
            .draw_series(merged.iter().map(|&(row, a, b)| {
                // At least a pixel wide, so that a microsecond span still shows.
                Rectangle::new([(a, SegmentValue::Exact(row)), (b.max(a + px_ms), SegmentValue::Exact(row + 1))], col.filled())
            }))
            .map_err(|e| fail(e.to_string()))?
            .label(cat.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], col.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| fail(e.to_string()))?;
    root.present().map_err(|e| fail(e.to_string()))?;
    Ok(Drawn { rows: rows.len(), boxes, failures })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Recorder;
    use serde_json::json;
    use std::time::Instant;

    #[test]
    fn draws_rows_boxes_and_failures() {
        let r = Recorder::new(Instant::now());
        r.span_at(Cat::Kernel, 1, "mm", 0.0, 500.0, vec![]);
        r.span_at(Cat::Kernel, 2, "mm", 100.0, 500.0, vec![]);
        r.span_at(Cat::Kernel, 2, "mm", 50_000.0, 500.0, vec![]);
        r.span_at(Cat::Recovery, 0, "recovery", 2000.0, 3000.0, vec![]);
        r.instant(Cat::Failure, 0, "rank 2 failed", vec![("rank", json!(2))]);
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("run.svg");
        let d = plot(&r.to_file(3), &out, 1200, "test").unwrap();
        // Rows: head's fault tolerance, worker 1 kernels, worker 2 kernels.
        assert_eq!(d.rows, 3);
        assert_eq!(d.boxes, 4, "three kernels and the recovery on its row");
        assert_eq!(d.failures, 1);
        let svg = std::fs::read_to_string(&out).unwrap();
        assert!(svg.starts_with("<svg"));
        assert!(svg.contains("worker 2: kernels"));
        assert!(svg.contains("rank 2 failed"));
    }
}

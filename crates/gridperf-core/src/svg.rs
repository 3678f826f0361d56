//! Line charts as self-contained SVG, for reports: no dependencies, no
//! scripts, no external fonts or styles, so a report is one file that opens
//! anywhere and can be checked by counting elements.
//!
//! Elements carry classes a test (or a style sheet) can find: `series` (one
//! polyline per series with points, with `data-label`), `band` (one
//! whisker per point that has one), `tick`, `axis-label`, `title`, `mark`,
//! `legend`, and `empty` for a chart with no data.

use std::fmt::Write as _;

/// One line of a chart.
#[derive(Debug, Clone, Default)]
pub struct Series {
    pub label: String,
    pub points: Vec<SeriesPoint>,
    /// Its colour (e.g. the same for a protocol in every chart); None: the
    /// palette's, in series order.
    pub color: Option<&'static str>,
}

/// The colour of a protocol in every chart of a report.
pub fn proto_color(proto: &str) -> Option<&'static str> {
    match proto {
        "tcp" => Some(PALETTE[0]),
        "udp" => Some(PALETTE[1]),
        "sendfile" => Some(PALETTE[2]),
        _ => None,
    }
}

/// A point of a series; `band` = (lo, hi), drawn as a whisker at the point
/// (e.g. the interquartile range around a median): only where a point was
/// measured, never interpolated between points.
#[derive(Debug, Clone, Copy)]
pub struct SeriesPoint {
    pub x: f64,
    pub y: f64,
    pub band: Option<(f64, f64)>,
}

/// What to draw; see [`render`].
#[derive(Debug, Clone, Default)]
pub struct Chart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub x_log: bool,
    pub y_log: bool,
    /// Clip to this x range (zoomed views), else the data's.
    pub x_range: Option<(f64, f64)>,
    pub series: Vec<Series>,
    /// Vertical dashed lines at x with a label (thresholds, MTU multiples).
    pub marks: Vec<(f64, String)>,
    /// Lines that were not measured but reckoned (a link's rate, a
    /// window's W/RTT limit): drawn dashed, without markers or whiskers,
    /// class `reference`, in the legend after the measured series.
    pub references: Vec<Series>,
    /// A linear y axis from zero (rates, bytes: a dip must not look like a
    /// collapse because the axis starts just below the lowest point).
    pub y_from_zero: bool,
    /// Events too many for labelled marks (every retransmission of a
    /// capture): a short tick at the bottom of the plot at each x, all of
    /// them, class `rug`, with `rug_label` in the legend.
    pub rug: Vec<f64>,
    pub rug_label: String,
}

/// Colour-blind-safe (Okabe and Ito), in the order series take them.
const PALETTE: [&str; 8] = ["#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#000000", "#999999"];

/// The palette's colour number `i` (wrapping), for lines that must match
/// (a measured series and its reference line).
pub fn palette(i: usize) -> &'static str {
    PALETTE[i % PALETTE.len()]
}

/// Series with more points than this get no point markers (they would hide the line).
const MARKER_MAX_POINTS: usize = 60;

/// XML escaping for text and attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    out
}

/// A number in at least `sig` significant digits with an SI suffix: 1, 250,
/// 1k, 1.5k, 64k, 12.3M. Sizes read as they are typed (64000 is 64k, as in
/// the size lists) and RTTs in nanoseconds stay short.
fn compact(v: f64, sig: usize) -> String {
    if v == 0.0 || !v.is_finite() {
        return "0".to_string();
    }
    let (scaled, suffix) = match v.abs() {
        a if a >= 1e9 => (v / 1e9, "G"),
        a if a >= 1e6 => (v / 1e6, "M"),
        a if a >= 1e3 => (v / 1e3, "k"),
        _ => (v, ""),
    };
    let int_digits = scaled.abs().log10().floor() as i64 + 1;
    let decimals = (sig as i64 - int_digits).max(0) as usize;
    let mut s = format!("{scaled:.decimals$}");
    if s.contains('.') {
        s = s.trim_end_matches('0').trim_end_matches('.').to_string();
    }
    s + suffix
}

/// Labels for ticks: 3 significant digits, more when needed to tell
/// neighbouring ticks apart (100.2k, 100.4k).
fn tick_labels(ticks: &[f64]) -> Vec<String> {
    let mut labels = Vec::new();
    for sig in 3..=8 {
        labels = ticks.iter().map(|&t| compact(t, sig)).collect();
        if labels.windows(2).all(|w| w[0] != w[1]) {
            break;
        }
    }
    labels
}

/// One axis: its domain and how values map onto it.
#[derive(Debug, Clone, Copy)]
struct Axis {
    lo: f64,
    hi: f64,
    log: bool,
}

impl Axis {
    /// Where `v` falls, 0 at `lo` and 1 at `hi`.
    fn unit(&self, v: f64) -> f64 {
        if self.log {
            (v.ln() - self.lo.ln()) / (self.hi.ln() - self.lo.ln())
        } else {
            (v - self.lo) / (self.hi - self.lo)
        }
    }

    fn contains(&self, v: f64) -> bool {
        let eps = (self.hi - self.lo).abs() * 1e-9;
        v.is_finite() && (!self.log || v > 0.0) && v >= self.lo - eps && v <= self.hi + eps
    }

    /// An axis over [lo, hi] made non-empty (a single value gets room around it).
    fn new(lo: f64, hi: f64, log: bool) -> Axis {
        if hi > lo {
            Axis { lo, hi, log }
        } else if log {
            Axis { lo: lo / 2.0, hi: hi * 2.0, log }
        } else {
            let pad = if lo == 0.0 { 1.0 } else { lo.abs() * 0.1 };
            Axis { lo: lo - pad, hi: hi + pad, log }
        }
    }

    /// A log axis widened by 4% of its span (in decades) at each end; a
    /// linear one as it is.
    fn padded(self) -> Axis {
        if !self.log {
            return self;
        }
        let k = (self.hi / self.lo).powf(0.04);
        Axis { lo: self.lo / k, hi: self.hi * k, log: true }
    }

    /// The axis widened to whole ticks (linear axes only: a log axis shows
    /// the data's decades as they are).
    fn niced(self) -> Axis {
        if self.log {
            return self;
        }
        let step = nice_step((self.hi - self.lo) / 5.0);
        Axis { lo: (self.lo / step).floor() * step, hi: (self.hi / step).ceil() * step, log: false }
    }

    /// Tick values: 1-2-5 steps on linear axes, powers of ten on log axes
    /// (with 2 and 5 times them when the axis holds fewer than 3 powers, and
    /// linear steps when it holds fewer than 2 of those).
    fn ticks(&self) -> Vec<f64> {
        if self.log {
            let decades: Vec<f64> = self.powers(&[1.0]);
            if decades.len() >= 3 {
                return decades;
            }
            let more = self.powers(&[1.0, 2.0, 5.0]);
            if more.len() >= 3 {
                return more;
            }
            // within a decade: every integer multiple (200, 300, ... 800)
            let every = self.powers(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]);
            if (2..=10).contains(&every.len()) {
                return every;
            }
        }
        let step = nice_step((self.hi - self.lo) / 5.0);
        let first = (self.lo / step).ceil() as i64;
        let last = (self.hi / step).floor() as i64;
        (first..=last).map(|i| i as f64 * step).filter(|&t| self.contains(t)).collect()
    }

    /// m x 10^e within the axis, for each multiplier m.
    fn powers(&self, multipliers: &[f64]) -> Vec<f64> {
        let (e0, e1) = (self.lo.log10().floor() as i32, self.hi.log10().ceil() as i32);
        (e0..=e1)
            .flat_map(|e| multipliers.iter().map(move |m| m * 10f64.powi(e)))
            .filter(|&t| self.contains(t))
            .collect()
    }
}

/// The 1, 2 or 5 times a power of ten nearest above `raw`.
fn nice_step(raw: f64) -> f64 {
    if !(raw.is_finite() && raw > 0.0) {
        return 1.0;
    }
    let mag = 10f64.powf(raw.log10().floor());
    let m = raw / mag;
    let nice = if m <= 1.0 {
        1.0
    } else if m <= 2.0 {
        2.0
    } else if m <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * mag
}

/// The plotting area, in pixels.
#[derive(Debug, Clone, Copy)]
struct Frame {
    left: f64,
    top: f64,
    right: f64,
    bottom: f64,
}

impl Frame {
    fn px(&self, axis: &Axis, x: f64) -> f64 {
        self.left + axis.unit(x) * (self.right - self.left)
    }

    fn py(&self, axis: &Axis, y: f64) -> f64 {
        self.bottom - axis.unit(y) * (self.bottom - self.top)
    }
}

/// A series' points that can be drawn: finite, inside `x_range`, positive
/// on log axes (a band that is not is dropped, the point stays), sorted by x.
fn drawable(series: &Series, chart: &Chart) -> Vec<SeriesPoint> {
    let x_ok = |x: f64| {
        x.is_finite() && (!chart.x_log || x > 0.0) && chart.x_range.is_none_or(|(a, b)| x >= a.min(b) && x <= a.max(b))
    };
    let y_ok = |y: f64| y.is_finite() && (!chart.y_log || y > 0.0);
    let mut pts: Vec<SeriesPoint> = series
        .points
        .iter()
        .filter(|p| x_ok(p.x) && y_ok(p.y))
        .map(|p| SeriesPoint { band: p.band.filter(|&(lo, hi)| y_ok(lo) && y_ok(hi)), ..*p })
        .collect();
    pts.sort_by(|a, b| a.x.total_cmp(&b.x));
    pts
}

/// The x and y axes for the drawable points (at least one).
fn axes(chart: &Chart, drawn: &[(usize, Vec<SeriesPoint>)]) -> (Axis, Axis) {
    let all = || drawn.iter().flat_map(|(_, pts)| pts.iter());
    let (mut x_lo, mut x_hi) = all().fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), p| (l.min(p.x), h.max(p.x)));
    if let Some((a, b)) = chart.x_range {
        let (a, b) = (a.min(b), a.max(b));
        if !chart.x_log || a > 0.0 {
            x_lo = a;
        }
        x_hi = b;
    }
    let (mut y_lo, y_hi) = all()
        .flat_map(|p| [Some(p.y), p.band.map(|b| b.0), p.band.map(|b| b.1)].into_iter().flatten())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), y| (l.min(y), h.max(y)));
    if chart.y_from_zero && !chart.y_log {
        y_lo = y_lo.min(0.0);
    }
    let x = Axis::new(x_lo, x_hi, chart.x_log);
    // no point (or whisker) on the frame itself: a log axis gets 4% of its
    // span beyond the data at each end (unless a range was asked for), a
    // linear y axis 3% beyond its data before it is widened to whole ticks
    let x = if chart.x_range.is_none() { x.padded() } else { x };
    let y = Axis::new(y_lo, y_hi, chart.y_log);
    let y = if chart.y_log {
        y.padded()
    } else {
        let pad = 0.03 * (y.hi - y.lo);
        // padding never takes positive data below zero
        let lo = if y.lo >= 0.0 { (y.lo - pad).max(0.0) } else { y.lo - pad };
        Axis { lo, hi: y.hi + pad, log: false }.niced()
    };
    (x, y)
}

/// "x1,y1 x2,y2 ..." for a polyline or polygon.
fn points_attr(coords: impl Iterator<Item = (f64, f64)>) -> String {
    coords.map(|(x, y)| format!("{x:.1},{y:.1}")).collect::<Vec<_>>().join(" ")
}

/// A self-contained `<svg>` element (width x height px): axes with "nice"
/// ticks and tick labels (numbers formatted compactly, 1k and 64k, with 3
/// significant digits), axis labels, title, a legend, one polyline per series
/// with points (distinct colours from a fixed palette), the bands as
/// translucent polygons, marks as dashed lines with labels.
///
/// Points outside `x_range` are dropped (not interpolated to its edge); log
/// axes skip non-positive values; lines join points in x order. A chart with
/// nothing to draw shows its frame and "no data". No external resources, no
/// scripts, no ids (several charts can share a page).
pub fn render(chart: &Chart, width: u32, height: u32) -> String {
    let (w, h) = (f64::from(width.max(120)), f64::from(height.max(80)));
    // the measured series, then the reference lines: an index past
    // `measured` is a reference
    let all: Vec<Series> = chart.series.iter().chain(&chart.references).cloned().collect();
    let measured = chart.series.len();
    let mut drawn: Vec<(usize, Vec<SeriesPoint>)> =
        all.iter().enumerate().map(|(i, s)| (i, drawable(s, chart))).filter(|(_, pts)| !pts.is_empty()).collect();
    // reference lines alone are no data
    if drawn.iter().all(|(i, _)| *i >= measured) {
        drawn.clear();
    }
    let legend_width = if drawn.is_empty() { 0.0 } else { (w * 0.25).clamp(60.0, 170.0) };
    let frame =
        Frame { left: 64.0, top: 34.0, right: (w - 16.0 - legend_width).max(80.0), bottom: (h - 44.0).max(50.0) };

    let mut out = String::new();
    let _ = write!(
        out,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="11" role="img" aria-label="{t}"><title>{t}</title><rect x="0" y="0" width="{w}" height="{h}" fill="#ffffff"/>"##,
        t = escape(&chart.title)
    );
    let _ = write!(
        out,
        r##"<text class="title" x="{:.1}" y="20" text-anchor="middle" font-size="14" font-weight="bold">{}</text>"##,
        w / 2.0,
        escape(&chart.title)
    );
    let _ = write!(
        out,
        r##"<text class="axis-label" x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
        (frame.left + frame.right) / 2.0,
        h - 8.0,
        escape(&chart.x_label)
    );
    let (yx, yy) = (14.0, (frame.top + frame.bottom) / 2.0);
    let _ = write!(
        out,
        r##"<text class="axis-label" x="{yx:.1}" y="{yy:.1}" text-anchor="middle" transform="rotate(-90 {yx:.1} {yy:.1})">{}</text>"##,
        escape(&chart.y_label)
    );
    let _ = write!(
        out,
        r##"<rect class="frame" x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="none" stroke="#444444"/>"##,
        frame.left,
        frame.top,
        frame.right - frame.left,
        frame.bottom - frame.top
    );

    if drawn.is_empty() {
        let _ = write!(
            out,
            r##"<text class="empty" x="{:.1}" y="{:.1}" text-anchor="middle" fill="#666666">no data</text></svg>"##,
            (frame.left + frame.right) / 2.0,
            (frame.top + frame.bottom) / 2.0
        );
        return out;
    }

    let (xa, ya) = axes(chart, &drawn);
    write_ticks(&mut out, &frame, &xa, &ya);
    for (i, pts) in &drawn {
        let line = Line { label: &all[*i].label, color: color_of(&all, *i), reference: *i >= measured };
        write_series(&mut out, &frame, &xa, &ya, &line, pts);
    }
    write_marks(&mut out, &frame, &xa, &chart.marks);
    let rug = write_rug(&mut out, &frame, &xa, &chart.rug);
    write_legend(&mut out, &frame, &all, measured, &drawn);
    if rug > 0 {
        let (x, y) = (frame.right + 12.0, frame.top + 8.0 + drawn.len() as f64 * 16.0);
        let _ = write!(
            out,
            r##"<g class="legend"><line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{RUG_COLOR}" stroke-width="1.5"/><text x="{:.1}" y="{:.1}">{}</text></g>"##,
            x + 8.0,
            y - 5.0,
            x + 8.0,
            y + 5.0,
            x + 21.0,
            y + 4.0,
            escape(&chart.rug_label)
        );
    }
    out.push_str("</svg>");
    out
}

/// Grid lines, tick marks and tick labels of both axes.
fn write_ticks(out: &mut String, frame: &Frame, xa: &Axis, ya: &Axis) {
    let xt = xa.ticks();
    for (t, label) in xt.iter().zip(tick_labels(&xt)) {
        let x = frame.px(xa, *t);
        let _ = write!(
            out,
            r##"<line class="grid" x1="{x:.1}" y1="{:.1}" x2="{x:.1}" y2="{:.1}" stroke="#e4e4e4"/><text class="tick" x="{x:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
            frame.top,
            frame.bottom,
            frame.bottom + 15.0,
            escape(&label)
        );
    }
    let yt = ya.ticks();
    for (t, label) in yt.iter().zip(tick_labels(&yt)) {
        let y = frame.py(ya, *t);
        let _ = write!(
            out,
            r##"<line class="grid" x1="{:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#e4e4e4"/><text class="tick" x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            frame.left,
            frame.right,
            frame.left - 5.0,
            y + 4.0,
            escape(&label)
        );
    }
}

/// A series' colour: its own, or the palette's in series order.
fn color_of(series: &[Series], i: usize) -> &'static str {
    series[i].color.unwrap_or(PALETTE[i % PALETTE.len()])
}

/// How a line is drawn: its label, its colour, and whether it is a
/// reference (dashed, no markers) rather than measured.
struct Line<'a> {
    label: &'a str,
    color: &'a str,
    reference: bool,
}

/// One series: a whisker at each point with a band, its line, and point
/// markers when the points are few; a reference line dashed, alone.
fn write_series(out: &mut String, frame: &Frame, xa: &Axis, ya: &Axis, line: &Line, pts: &[SeriesPoint]) {
    let (label, color) = (escape(line.label), line.color);
    if line.reference {
        let _ = write!(
            out,
            r##"<polyline class="reference" data-label="{label}" points="{}" fill="none" stroke="{color}" stroke-width="1.2" stroke-dasharray="6 4"/>"##,
            points_attr(pts.iter().map(|p| (frame.px(xa, p.x), frame.py(ya, p.y))))
        );
        return;
    }
    for p in pts {
        let Some((lo, hi)) = p.band else { continue };
        let (x, y1, y2) = (frame.px(xa, p.x), frame.py(ya, lo), frame.py(ya, hi));
        let _ = write!(
            out,
            r##"<path class="band" data-label="{label}" d="M{x:.1},{y1:.1}V{y2:.1}M{:.1},{y1:.1}H{:.1}M{:.1},{y2:.1}H{:.1}" stroke="{color}" stroke-opacity="0.55" stroke-width="1.2" fill="none"/>"##,
            x - 3.0,
            x + 3.0,
            x - 3.0,
            x + 3.0
        );
    }
    let _ = write!(
        out,
        r##"<polyline class="series" data-label="{label}" points="{}" fill="none" stroke="{color}" stroke-width="1.5" stroke-linejoin="round"/>"##,
        points_attr(pts.iter().map(|p| (frame.px(xa, p.x), frame.py(ya, p.y))))
    );
    if pts.len() <= MARKER_MAX_POINTS {
        for p in pts {
            let _ = write!(
                out,
                r##"<circle class="marker" cx="{:.1}" cy="{:.1}" r="2.5" fill="{color}"/>"##,
                frame.px(xa, p.x),
                frame.py(ya, p.y)
            );
        }
    }
}

/// Marks inside the x axis: a dashed line and its label. Labels are laid
/// out in rows from the top so that none overlaps another (a label takes
/// the first row where it fits, its width taken at 6 px a character), and
/// a label that would run past the plot's right edge (into the legend) is
/// set to the left of its line.
fn write_marks(out: &mut String, frame: &Frame, xa: &Axis, marks: &[(f64, String)]) {
    let mut rows: Vec<Vec<(f64, f64)>> = Vec::new();
    let mut placed: Vec<(f64, &str, f64, bool)> = Vec::new();
    let mut inside: Vec<&(f64, String)> = marks.iter().filter(|(x, _)| xa.contains(*x)).collect();
    inside.sort_by(|a, b| a.0.total_cmp(&b.0));
    for (x, label) in inside {
        let px = frame.px(xa, *x);
        let width = 6.0 * label.chars().count() as f64 + 4.0;
        let leftwards = px + 3.0 + width > frame.right;
        let span = if leftwards { (px - 3.0 - width, px) } else { (px, px + 3.0 + width) };
        let row = rows.iter().position(|r| r.iter().all(|&(a, b)| span.1 < a || span.0 > b)).unwrap_or(rows.len());
        if row == rows.len() {
            rows.push(Vec::new());
        }
        rows[row].push(span);
        placed.push((px, label, frame.top + 11.0 + row as f64 * 12.0, leftwards));
    }
    for (px, label, y, leftwards) in placed {
        let (tx, anchor) = if leftwards { (px - 3.0, "end") } else { (px + 3.0, "start") };
        let _ = write!(
            out,
            r##"<g class="mark"><line x1="{px:.1}" y1="{:.1}" x2="{px:.1}" y2="{:.1}" stroke="#555555" stroke-dasharray="4 3"/><text x="{tx:.1}" y="{y:.1}" font-size="10" fill="#333333" text-anchor="{anchor}">{}</text></g>"##,
            frame.top,
            frame.bottom,
            escape(label)
        );
    }
}

/// The rug's colour: not one of the palette's (it is no series).
const RUG_COLOR: &str = "#c00000";

/// A tick at the bottom of the plot at each x inside the axis, all in one
/// path; returns how many were drawn.
fn write_rug(out: &mut String, frame: &Frame, xa: &Axis, xs: &[f64]) -> usize {
    let inside: Vec<f64> = xs.iter().copied().filter(|x| xa.contains(*x)).collect();
    if inside.is_empty() {
        return 0;
    }
    let mut d = String::with_capacity(inside.len() * 20);
    for x in &inside {
        let _ = write!(d, "M{:.1},{:.1}V{:.1}", frame.px(xa, *x), frame.bottom, frame.bottom - 9.0);
    }
    let _ = write!(
        out,
        r##"<path class="rug" data-count="{}" d="{d}" stroke="{RUG_COLOR}" stroke-width="1" fill="none"/>"##,
        inside.len()
    );
    inside.len()
}

/// The legend, right of the plot: a swatch and the label of each drawn series.
fn write_legend(
    out: &mut String,
    frame: &Frame,
    series: &[Series],
    measured: usize,
    drawn: &[(usize, Vec<SeriesPoint>)],
) {
    out.push_str(r#"<g class="legend">"#);
    for (row, (i, _)) in drawn.iter().enumerate() {
        let (x, y) = (frame.right + 12.0, frame.top + 8.0 + row as f64 * 16.0);
        let (width, dash) = if *i >= measured { (1.5, r#" stroke-dasharray="4 2""#) } else { (3.0, "") };
        let _ = write!(
            out,
            r##"<line x1="{x:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="{}" stroke-width="{width}"{dash}/><text x="{:.1}" y="{:.1}">{}</text>"##,
            x + 16.0,
            color_of(series, *i),
            x + 21.0,
            y + 4.0,
            escape(&series[*i].label)
        );
    }
    out.push_str("</g>");
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Checks that tags nest and close: a stack of element names, `<.../>`
    /// closing itself. Returns the element count.
    fn check_balanced(svg: &str) -> usize {
        assert_eq!(svg.matches("<svg").count(), 1, "{svg}");
        assert_eq!(svg.matches("</svg>").count(), 1, "{svg}");
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"));
        let mut stack: Vec<&str> = Vec::new();
        let mut count = 0;
        let mut rest = svg;
        while let Some(start) = rest.find('<') {
            let end = start + rest[start..].find('>').expect("an unclosed tag");
            let tag = &rest[start + 1..end];
            assert!(!tag.contains('<'), "a raw < inside a tag: {tag}");
            if let Some(name) = tag.strip_prefix('/') {
                assert_eq!(stack.pop(), Some(name), "in {svg}");
            } else {
                count += 1;
                let name = tag.split(|c: char| c.is_whitespace() || c == '/').next().unwrap_or("");
                if !tag.ends_with('/') {
                    stack.push(name);
                }
            }
            rest = &rest[end + 1..];
        }
        assert!(stack.is_empty(), "unclosed: {stack:?}");
        count
    }

    fn series(label: &str, pts: &[(f64, f64)]) -> Series {
        Series {
            label: label.into(),
            points: pts.iter().map(|&(x, y)| SeriesPoint { x, y, band: None }).collect(),
            color: None,
        }
    }

    fn count(svg: &str, class: &str) -> usize {
        svg.matches(&format!("class=\"{class}\"")).count()
    }

    /// The text of each element with `class`.
    fn texts<'a>(svg: &'a str, class: &str) -> Vec<&'a str> {
        svg.split(&format!("class=\"{class}\""))
            .skip(1)
            .map(|s| {
                let from = s.find('>').expect("tag end") + 1;
                &s[from..from + s[from..].find('<').expect("text end")]
            })
            .collect()
    }

    fn rtt_chart() -> Chart {
        let sizes = [1.0, 64.0, 1024.0, 1500.0, 4096.0, 16384.0, 64000.0];
        let line = |base: f64| {
            sizes
                .iter()
                .map(|&s| SeriesPoint { x: s, y: base + s, band: Some((base + s * 0.9, base + s * 1.1)) })
                .collect()
        };
        Chart {
            title: "RTT by size".into(),
            x_label: "message size (B)".into(),
            y_label: "RTT (ns)".into(),
            x_log: true,
            series: vec![
                Series { label: "tcp".into(), points: line(20_000.0), color: proto_color("tcp") },
                Series { label: "udp".into(), points: line(15_000.0), color: proto_color("udp") },
                Series { label: "sendfile".into(), points: vec![], color: proto_color("sendfile") },
            ],
            marks: vec![(2920.0, "2 x MTU".into()), (1e9, "far outside".into())],
            ..Chart::default()
        }
    }

    #[test]
    fn reference_lines_are_dashed_in_the_legend_and_alone_are_no_data() {
        let mut chart = Chart {
            title: "throughput by delay".into(),
            series: vec![series("4 MB", &[(0.0, 300.0), (5.0, 350.0), (10.0, 330.0)])],
            references: vec![series("link 622M", &[(0.0, 622.0), (10.0, 622.0)]), series("empty", &[])],
            ..Chart::default()
        };
        let svg = render(&chart, 800, 400);
        check_balanced(&svg);
        assert_eq!(count(&svg, "series"), 1);
        assert_eq!(count(&svg, "reference"), 1, "the one with points");
        assert!(
            svg.contains(r#"class="reference" data-label="link 622M""#) && svg.contains("stroke-dasharray=\"6 4\"")
        );
        assert_eq!(svg.matches("<circle").count(), 3, "markers on the measured points only");
        // the y axis reaches the reference: its top tick is at least 622
        let top: f64 = texts(&svg, "tick").iter().filter_map(|t| t.parse().ok()).fold(0.0, f64::max);
        assert!(top >= 622.0, "{top}");
        chart.series.clear();
        let svg = render(&chart, 800, 400);
        assert_eq!((count(&svg, "empty"), count(&svg, "reference")), (1, 0), "references without data: no data");
    }

    #[test]
    fn a_chart_has_its_parts() {
        let svg = render(&rtt_chart(), 800, 480);
        check_balanced(&svg);
        assert_eq!(count(&svg, "series"), 2, "one per series with points");
        assert!(svg.contains(r#"class="series" data-label="tcp""#));
        assert_eq!(count(&svg, "band"), 14, "a whisker at each of the 7 points of the 2 lines");
        assert_eq!(count(&svg, "title"), 1);
        assert_eq!(count(&svg, "axis-label"), 2);
        assert_eq!(count(&svg, "mark"), 1, "the mark outside the axis is dropped");
        assert_eq!(count(&svg, "legend"), 1);
        assert_eq!(count(&svg, "empty"), 0);
        assert!(count(&svg, "tick") >= 4);
        assert!(!svg.contains("<script") && !svg.contains("href"), "self-contained");
    }

    #[test]
    fn log_axes_tick_at_powers_of_ten() {
        let chart = Chart {
            x_log: true,
            y_log: true,
            series: vec![series("a", &[(1.0, 10.0), (100.0, 1000.0), (64000.0, 100_000.0)])],
            ..Chart::default()
        };
        let svg = render(&chart, 640, 400);
        check_balanced(&svg);
        let ticks = texts(&svg, "tick");
        assert_eq!(ticks, vec!["1", "10", "100", "1k", "10k", "10", "100", "1k", "10k", "100k"]);
        // y within 15k..90.4k, less than a decade: every multiple of ten thousand
        let mut one = rtt_chart();
        one.y_log = true;
        let svg = render(&one, 640, 400);
        let ticks = texts(&svg, "tick");
        assert!(ticks.ends_with(&["20k", "30k", "40k", "50k", "60k", "70k", "80k", "90k"]), "{ticks:?}");
        // across 1 .. 64000 with 2 and 5 there are enough decades already
        let wide = Chart { x_log: true, series: vec![series("a", &[(200.0, 1.0), (3000.0, 2.0)])], ..Chart::default() };
        let svg = render(&wide, 640, 400);
        let ticks = texts(&svg, "tick");
        assert!(ticks.starts_with(&["200", "500", "1k", "2k"]), "{ticks:?}");
    }

    #[test]
    fn linear_ticks_are_nice_and_compact() {
        let chart = Chart { series: vec![series("a", &[(0.0, 0.0), (64000.0, 1234.0)])], ..Chart::default() };
        let svg = render(&chart, 640, 400);
        let ticks = texts(&svg, "tick");
        // x: the data's 0..64000 in steps of 20k; y: 0..1234 widened to 0..1.5k in steps of 500
        assert_eq!(ticks, vec!["0", "20k", "40k", "60k", "0", "500", "1k", "1.5k"]);
        assert_eq!(compact(64000.0, 3), "64k");
        assert_eq!(compact(1500.0, 3), "1.5k");
        assert_eq!(compact(123456.0, 3), "123k");
        assert_eq!(compact(0.125, 3), "0.125");
        assert_eq!(compact(2.5e6, 3), "2.5M");
        assert_eq!(tick_labels(&[100_200.0, 100_400.0]), vec!["100.2k", "100.4k"]);
    }

    #[test]
    fn labels_are_escaped() {
        let chart = Chart {
            title: "a <b> & \"c\"".into(),
            x_label: "<x>".into(),
            series: vec![series("tcp <nagle> & \"cork\"", &[(1.0, 2.0), (2.0, 3.0)])],
            marks: vec![(1.5, "<mark>".into())],
            ..Chart::default()
        };
        let svg = render(&chart, 400, 300);
        check_balanced(&svg);
        assert!(svg.contains(r#"data-label="tcp &lt;nagle&gt; &amp; &quot;cork&quot;""#), "{svg}");
        assert!(svg.contains("a &lt;b&gt; &amp; &quot;c&quot;"));
        assert!(!svg.contains("<nagle>") && !svg.contains("<mark>") && !svg.contains("<x>"));
        assert_eq!(escape("'<&>\""), "&apos;&lt;&amp;&gt;&quot;");
    }

    #[test]
    fn x_range_drops_points_outside() {
        let mut chart = Chart {
            series: vec![
                series("a", &[(1.0, 1.0), (5.0, 2.0), (10.0, 3.0), (50.0, 4.0)]),
                series("b", &[(100.0, 1.0)]),
            ],
            x_range: Some((2.0, 20.0)),
            ..Chart::default()
        };
        let svg = render(&chart, 400, 300);
        check_balanced(&svg);
        assert_eq!(count(&svg, "series"), 1, "b has no point in range");
        let line = svg.split(r#"class="series""#).nth(1).expect("a line");
        let pts = line.split("points=\"").nth(1).expect("points").split('"').next().expect("end");
        assert_eq!(pts.split(' ').count(), 2, "{pts}");
        chart.x_range = Some((200.0, 300.0));
        let svg = render(&chart, 400, 300);
        assert_eq!(count(&svg, "empty"), 1);
        assert_eq!(count(&svg, "series"), 0);
    }

    #[test]
    fn empty_charts_say_no_data() {
        for chart in [
            Chart::default(),
            Chart { series: vec![series("a", &[])], ..Chart::default() },
            Chart {
                y_log: true,
                series: vec![series("a", &[(1.0, 0.0), (2.0, -1.0), (3.0, f64::NAN)])],
                ..Chart::default()
            },
        ] {
            let svg = render(&chart, 300, 200);
            check_balanced(&svg);
            assert_eq!(count(&svg, "empty"), 1, "{svg}");
            assert_eq!(count(&svg, "series"), 0);
            assert_eq!(count(&svg, "frame"), 1);
            assert_eq!(count(&svg, "tick"), 0);
        }
    }

    #[test]
    fn one_point_and_flat_series_still_draw() {
        let chart = Chart { series: vec![series("one", &[(3.0, 7.0)])], x_log: true, y_log: true, ..Chart::default() };
        let svg = render(&chart, 300, 200);
        check_balanced(&svg);
        assert_eq!(count(&svg, "series"), 1);
        assert!(!svg.contains("NaN") && !svg.contains("inf"), "{svg}");
        let flat = Chart { series: vec![series("flat", &[(0.0, 5.0), (10.0, 5.0)])], ..Chart::default() };
        let svg = render(&flat, 300, 200);
        assert!(!svg.contains("NaN") && !svg.contains("inf"), "{svg}");
    }

    #[test]
    fn mark_labels_never_overlap_and_stay_in_the_plot() {
        let mut chart = rtt_chart();
        chart.marks = (0..8).map(|k| (1400.0 + 30.0 * k as f64, format!("tcp jump {k}"))).collect();
        chart.marks.push((63_000.0, "udp slope-up near the edge".into()));
        let svg = render(&chart, 800, 480);
        check_balanced(&svg);
        // each label's box: (x from, x to, baseline)
        let boxes: Vec<(f64, f64, f64)> = svg
            .split(r#"<g class="mark">"#)
            .skip(1)
            .map(|g| {
                let text = g.split("<text ").nth(1).expect("a label");
                let num = |key: &str| -> f64 {
                    text.split(&format!("{key}=\""))
                        .nth(1)
                        .expect("attr")
                        .split('"')
                        .next()
                        .expect("end")
                        .parse()
                        .expect("number")
                };
                let label = &text[text.find('>').expect(">") + 1..text.find('<').expect("<")];
                let width = 6.0 * label.chars().count() as f64;
                let end = text.contains(r#"text-anchor="end""#);
                let x = num("x");
                if end {
                    (x - width, x, num("y"))
                } else {
                    (x, x + width, num("y"))
                }
            })
            .collect();
        assert_eq!(boxes.len(), 9);
        for (i, a) in boxes.iter().enumerate() {
            for b in &boxes[i + 1..] {
                assert!(a.2 != b.2 || a.1 < b.0 || b.1 < a.0, "overlap: {a:?} {b:?}");
            }
        }
        // the plot's right edge: the legend starts beyond it
        let right = 800.0 - 16.0 - (800.0f64 * 0.25).clamp(60.0, 170.0);
        assert!(boxes.iter().all(|b| b.1 <= right + 1.0), "{boxes:?}");
    }

    #[test]
    fn a_protocol_keeps_its_colour_in_every_chart() {
        let one = Chart {
            series: vec![Series {
                label: "udp".into(),
                points: vec![SeriesPoint { x: 1.0, y: 1.0, band: None }],
                color: proto_color("udp"),
            }],
            ..Chart::default()
        };
        let svg = render(&one, 300, 200);
        assert!(svg.contains(r#"data-label="udp" points="#) && svg.contains(proto_color("udp").expect("udp")));
        assert!(!svg.contains(PALETTE[0]), "udp alone does not take the first colour");
    }

    /// The y of each marker, the frame's top and bottom.
    fn marker_ys(svg: &str) -> (Vec<f64>, f64, f64) {
        let ys = svg
            .split("class=\"marker\" cx=\"")
            .skip(1)
            .map(|s| {
                let s = &s[s.find("cy=\"").expect("cy") + 4..];
                s[..s.find('"').expect("end")].parse().expect("a number")
            })
            .collect();
        let f = &svg[svg.find("class=\"frame\"").expect("frame")..];
        let num = |k: &str| -> f64 {
            let s = &f[f.find(k).expect(k) + k.len()..];
            s[..s.find('"').expect("end")].parse().expect("a number")
        };
        let top = num(" y=\"");
        (ys, top, top + num("height=\""))
    }

    #[test]
    fn a_rate_axis_starts_at_zero_when_asked() {
        let chart = Chart {
            series: vec![series("rate", &[(1.0, 940.0), (2.0, 950.0), (3.0, 610.0)])],
            y_from_zero: true,
            ..Chart::default()
        };
        let svg = render(&chart, 600, 300);
        assert_eq!(texts(&svg, "tick").iter().filter(|t| **t == "0").count(), 1, "{svg}");
        let chart = Chart { y_from_zero: false, ..chart };
        assert!(!texts(&render(&chart, 600, 300), "tick").contains(&"0"), "without it the axis hugs the data");
    }

    #[test]
    fn no_point_sits_on_the_frame() {
        for y_log in [false, true] {
            let chart = Chart {
                series: vec![series("t", &[(1.0, 900.0), (10.0, 950.0), (1000.0, 1000.0)])],
                x_log: true,
                y_log,
                ..Chart::default()
            };
            let svg = render(&chart, 600, 300);
            let (ys, top, bottom) = marker_ys(&svg);
            assert_eq!(ys.len(), 3);
            for y in ys {
                assert!(y > top + 2.0 && y < bottom - 2.0, "a marker at y {y} on the frame {top}..{bottom}: {svg}");
            }
        }
    }

    #[test]
    fn the_rug_draws_every_event_inside_the_axis() {
        let chart = Chart {
            series: vec![series("seq", &[(0.0, 0.0), (10.0, 5.0)])],
            rug: (0..4548).map(|k| k as f64 * 10.0 / 4548.0).chain([99.0]).collect(),
            rug_label: "retransmission".into(),
            ..Chart::default()
        };
        let svg = render(&chart, 600, 300);
        assert_eq!(count(&svg, "rug"), 1);
        assert!(svg.contains("data-count=\"4548\""), "every event inside the axis, none beyond it");
        assert_eq!(svg.matches("V").count() - svg.matches("class=\"band\"").count(), 4548, "a tick each");
        assert!(svg.contains(">retransmission</text>"), "in the legend");
        check_balanced(&svg);
    }
}

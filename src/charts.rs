//! Spend charts as PNG images: an agent's budget burn-down (spend over cycles against its budget
//! and soft cap) and a server's spend per day, by person and by agent.
//!
//! Text is drawn with the DejaVu Sans font compiled into the binary, so a chart looks the same on a
//! bare container as on a desktop, and no system font library is needed.
//!
//! Charts are drawn by plotters on its bitmap backend with text through ab_glyph (the font from the
//! `dejavu` crate) and encoded with `png`, at `WIDTH` × `HEIGHT` pixels. `burn_down_png` draws
//! `BurnDown` (spend after each cycle, the budget and the soft cap as lines); `daily_spend_png`
//! draws two panels of stacked bars, by person and by agent, each with a key and totals;
//! `DailySpend::from_rows` keeps the `NAMED_SERIES` largest series and sums the rest as "others".

use std::sync::OnceLock;

use chrono::NaiveDate;
use plotters::coord::Shift;
use plotters::prelude::*;

use crate::core::budget::{format_usd, Micros};

/// The size of every chart: wide enough for two weeks of labelled days, small enough to show
/// inline in Discord without a click.
pub const WIDTH: u32 = 900;
pub const HEIGHT: u32 = 500;

/// How many people or agents a daily chart names; the rest are summed as "others", so the
/// legend stays readable whatever the size of the server.
pub const NAMED_SERIES: usize = 7;

/// The font family every chart's text uses, registered once per process.
const FONT: &str = "sans-serif";

#[derive(Debug, thiserror::Error)]
#[error("the chart could not be drawn: {0}")]
pub struct ChartError(String);

fn chart_error(e: impl std::fmt::Display) -> ChartError {
    ChartError(e.to_string())
}

/// An agent's spend after each cycle it closed, and the limits it runs under.
#[derive(Debug, Clone, PartialEq)]
pub struct BurnDown {
    pub agent_name: String,
    /// The cycle the line starts after, at zero: 0, or the cycle a fork began after.
    pub starts_after: u64,
    /// `(cycle, spent so far)`, in cycle order; spend never falls.
    pub spent_after_cycle: Vec<(u64, Micros)>,
    pub budget: Micros,
    /// The spend from which the agent no longer runs by itself.
    pub soft_cap: Micros,
}

/// Spend per day for one kind of spender (people, or agents): one series per name.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DailySpend {
    pub days: Vec<NaiveDate>,
    /// `(name, spend on each of days)`, largest total first.
    pub series: Vec<(String, Vec<Micros>)>,
}

impl DailySpend {
    /// Builds the series from `(name, day, spend)` rows, keeping the `NAMED_SERIES` largest
    /// spenders by name and summing the rest as "others".
    pub fn from_rows(days: Vec<NaiveDate>, rows: &[(String, NaiveDate, Micros)]) -> DailySpend {
        let mut by_name: Vec<(String, Vec<Micros>)> = Vec::new();
        for (name, day, spent) in rows {
            let Some(at) = days.iter().position(|d| d == day) else {
                continue;
            };
            let index = match by_name.iter().position(|(n, _)| n == name) {
                Some(index) => index,
                None => {
                    by_name.push((name.clone(), vec![Micros::ZERO; days.len()]));
                    by_name.len() - 1
                }
            };
            let cell = &mut by_name[index].1[at];
            *cell = cell.saturating_add(*spent);
        }
        let total = |spend: &[Micros]| spend.iter().map(|m| m.0).sum::<u64>();
        by_name.sort_by(|a, b| total(&b.1).cmp(&total(&a.1)).then(a.0.cmp(&b.0)));
        if by_name.len() > NAMED_SERIES {
            let rest = by_name.split_off(NAMED_SERIES);
            let mut others = vec![Micros::ZERO; days.len()];
            for (_, spend) in rest {
                for (cell, spent) in others.iter_mut().zip(spend) {
                    *cell = cell.saturating_add(spent);
                }
            }
            by_name.push(("others".into(), others));
        }
        DailySpend {
            days,
            series: by_name,
        }
    }

    /// Renames each series but "others" (ids become names); `None` keeps the id.
    pub fn rename(&mut self, mut name: impl FnMut(&str) -> Option<String>) {
        let named = self.series.len().min(NAMED_SERIES);
        for (id, _) in &mut self.series[..named] {
            if let Some(new) = name(id) {
                *id = new;
            }
        }
    }

    /// Each series' name and what it spent over the whole window, as the key shows them.
    pub fn totals(&self) -> Vec<(String, Micros)> {
        self.series
            .iter()
            .map(|(name, per_day)| (name.clone(), per_day.iter().copied().sum()))
            .collect()
    }

    /// The spend of every series on day `at`.
    fn day_total(&self, at: usize) -> Micros {
        self.series.iter().fold(Micros::ZERO, |sum, (_, spend)| {
            sum.saturating_add(spend[at])
        })
    }
}

/// Registers the compiled-in font under the family name the charts ask for.
fn register_font() -> Result<(), ChartError> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let ok = *REGISTERED.get_or_init(|| {
        plotters::style::register_font(FONT, FontStyle::Normal, dejavu::sans::regular()).is_ok()
    });
    if ok {
        Ok(())
    } else {
        Err(ChartError("the compiled-in font could not be read".into()))
    }
}

/// Draws into an RGB buffer with `draw` and encodes it as PNG.
fn render(
    draw: impl FnOnce(&DrawingArea<BitMapBackend<'_>, Shift>) -> Result<(), ChartError>,
) -> Result<Vec<u8>, ChartError> {
    register_font()?;
    let mut pixels = vec![0u8; (WIDTH * HEIGHT * 3) as usize];
    {
        let root = BitMapBackend::with_buffer(&mut pixels, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE).map_err(chart_error)?;
        draw(&root)?;
        root.present().map_err(chart_error)?;
    }
    let mut png = Vec::new();
    {
        let mut encoder = png::Encoder::new(&mut png, WIDTH, HEIGHT);
        encoder.set_color(png::ColorType::Rgb);
        encoder.set_depth(png::BitDepth::Eight);
        let mut writer = encoder.write_header().map_err(chart_error)?;
        writer.write_image_data(&pixels).map_err(chart_error)?;
    }
    Ok(png)
}

fn usd(micros: Micros) -> f64 {
    micros.0 as f64 / 1_000_000.0
}

/// A dollar axis label: whole cents once the axis reaches a dollar, finer below.
fn usd_label(value: f64) -> String {
    format_usd(crate::core::budget::usd_to_micros(value.max(0.0)))
}

const SPENT: RGBColor = RGBColor(33, 102, 172);
const BUDGET: RGBColor = RGBColor(200, 30, 30);
const SOFT_CAP: RGBColor = RGBColor(230, 140, 0);

/// The burn-down: spend after each cycle as a line, with the budget and the soft cap across.
pub fn burn_down_png(chart: &BurnDown) -> Result<Vec<u8>, ChartError> {
    let last_cycle = chart
        .spent_after_cycle
        .last()
        .map_or(1, |(cycle, _)| *cycle)
        .max(1);
    let spent_max = chart
        .spent_after_cycle
        .iter()
        .map(|(_, spent)| *spent)
        .max()
        .unwrap_or_default();
    // The budget is always in view: how close the agent is to it is the point of the chart.
    let top = usd(spent_max.max(chart.budget)).max(0.01) * 1.08;
    render(|root| {
        let mut plot = ChartBuilder::on(root)
            .caption(
                format!(
                    "{}: {} of {} spent",
                    chart.agent_name,
                    format_usd(spent_max),
                    format_usd(chart.budget)
                ),
                (FONT, 22),
            )
            .margin(16)
            .x_label_area_size(40)
            .y_label_area_size(80)
            .build_cartesian_2d(
                chart.starts_after..last_cycle.max(chart.starts_after + 1),
                0f64..top,
            )
            .map_err(chart_error)?;
        plot.configure_mesh()
            .x_desc("cycle")
            .y_desc("spent")
            .y_label_formatter(&|v| usd_label(*v))
            .label_style((FONT, 14))
            .draw()
            .map_err(chart_error)?;
        let across = |at: Micros| {
            vec![
                (chart.starts_after, usd(at)),
                (last_cycle.max(chart.starts_after + 1), usd(at)),
            ]
        };
        plot.draw_series(LineSeries::new(
            across(chart.budget),
            BUDGET.stroke_width(2),
        ))
        .map_err(chart_error)?
        .label(format!("budget {}", format_usd(chart.budget)))
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BUDGET.stroke_width(2)));
        plot.draw_series(LineSeries::new(
            across(chart.soft_cap),
            SOFT_CAP.stroke_width(2),
        ))
        .map_err(chart_error)?
        .label(format!("soft cap {}", format_usd(chart.soft_cap)))
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], SOFT_CAP.stroke_width(2)));
        let line = std::iter::once((chart.starts_after, 0.0)).chain(
            chart
                .spent_after_cycle
                .iter()
                .map(|(cycle, spent)| (*cycle, usd(*spent))),
        );
        plot.draw_series(LineSeries::new(line, SPENT.stroke_width(3)))
            .map_err(chart_error)?
            .label("spent")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], SPENT.stroke_width(3)));
        plot.configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .label_font((FONT, 14))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(chart_error)
    })
}

/// Two panels of stacked bars, one bar a day: spend by person above, by agent below.
pub fn daily_spend_png(
    title: &str,
    by_person: &DailySpend,
    by_agent: &DailySpend,
) -> Result<Vec<u8>, ChartError> {
    render(|root| {
        let root = root.titled(title, (FONT, 22)).map_err(chart_error)?;
        let (upper, lower) = root.split_vertically(HEIGHT / 2 - 20);
        stacked_bars(&upper, "by person", by_person)?;
        stacked_bars(&lower, "by agent", by_agent)
    })
}

/// The width of the key beside each panel of bars, so that it never hides a bar.
const KEY_WIDTH: u32 = 190;

fn stacked_bars(
    area: &DrawingArea<BitMapBackend<'_>, Shift>,
    caption: &str,
    spend: &DailySpend,
) -> Result<(), ChartError> {
    let (area, key) = area.split_horizontally(WIDTH - KEY_WIDTH);
    // Day `i` is centred on x = i, its bar 0.8 wide: a plain number axis keeps a window of one
    // day as wide as any other (plotters' segmented integer axis has no room for a single day).
    let days = spend.days.len().max(1);
    let top = (0..spend.days.len())
        .map(|at| spend.day_total(at))
        .max()
        .unwrap_or_default();
    let top = usd(top).max(0.01) * 1.1;
    let mut plot = ChartBuilder::on(&area)
        .caption(caption, (FONT, 16))
        .margin(10)
        .x_label_area_size(28)
        .y_label_area_size(80)
        .build_cartesian_2d(-0.5f64..days as f64 - 0.5, 0f64..top)
        .map_err(chart_error)?;
    plot.configure_mesh()
        .disable_x_mesh()
        .x_labels(days)
        .x_label_formatter(&|x| {
            let at = x.round();
            if (x - at).abs() > 1e-6 || at < 0.0 {
                return String::new();
            }
            spend
                .days
                .get(at as usize)
                .map(|d| d.format("%m-%d").to_string())
                .unwrap_or_default()
        })
        .y_label_formatter(&|v| usd_label(*v))
        .label_style((FONT, 12))
        .draw()
        .map_err(chart_error)?;
    let mut floor = vec![0f64; spend.days.len()];
    for (index, (name, per_day)) in spend.series.iter().enumerate() {
        let colour = Palette99::pick(index).to_rgba();
        let bars: Vec<Rectangle<(f64, f64)>> = per_day
            .iter()
            .enumerate()
            .filter(|(_, spent)| !spent.is_zero())
            .map(|(at, spent)| {
                let from = floor[at];
                floor[at] += usd(*spent);
                let x = at as f64;
                Rectangle::new([(x - 0.4, from), (x + 0.4, floor[at])], colour.filled())
            })
            .collect();
        plot.draw_series(bars).map_err(chart_error)?;
        // The key: a swatch, the name and what it spent over the whole window.
        let y = 40 + 20 * index as i32;
        key.draw(&Rectangle::new([(6, y), (18, y + 12)], colour.filled()))
            .map_err(chart_error)?;
        let total: Micros = per_day.iter().copied().sum();
        let label: String = name.chars().take(16).collect();
        key.draw(&Text::new(
            format!("{label} {}", format_usd(total)),
            (24, y),
            (FONT, 13).into_font(),
        ))
        .map_err(chart_error)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Decodes a PNG into its size and RGB pixels.
    fn decode(png_bytes: &[u8]) -> (u32, u32, Vec<u8>) {
        let decoder = png::Decoder::new(std::io::Cursor::new(png_bytes));
        let mut reader = decoder.read_info().unwrap();
        let mut pixels = vec![0; reader.output_buffer_size()];
        let frame = reader.next_frame(&mut pixels).unwrap();
        pixels.truncate(frame.buffer_size());
        (frame.width, frame.height, pixels)
    }

    fn count_colour(pixels: &[u8], colour: RGBColor) -> usize {
        pixels
            .chunks_exact(3)
            .filter(|p| p[0] == colour.0 && p[1] == colour.1 && p[2] == colour.2)
            .count()
    }

    #[test]
    fn a_burn_down_is_a_png_of_its_size_showing_spend_budget_and_soft_cap() {
        let chart = BurnDown {
            agent_name: "ChartGPT".into(),
            starts_after: 0,
            spent_after_cycle: (1..=20).map(|c| (c, Micros(c * 20_000))).collect(),
            budget: Micros(1_000_000),
            soft_cap: Micros(800_000),
        };
        let (width, height, pixels) = decode(&burn_down_png(&chart).unwrap());
        assert_eq!((width, height), (WIDTH, HEIGHT));
        let white = count_colour(&pixels, WHITE);
        assert!(white < (WIDTH * HEIGHT) as usize * 98 / 100, "blank");
        // Each line is drawn in its own colour, long enough to see.
        for colour in [SPENT, BUDGET, SOFT_CAP] {
            assert!(count_colour(&pixels, colour) > 300, "{colour:?} missing");
        }
        // The caption and axis labels are drawn: dark text pixels beyond the lines' colours.
        let dark = pixels
            .chunks_exact(3)
            .filter(|p| p.iter().all(|&c| c < 80))
            .count();
        assert!(dark > 1_000, "no text drawn ({dark} dark pixels)");
    }

    #[test]
    fn a_burn_down_without_cycles_still_draws_its_budget() {
        let chart = BurnDown {
            agent_name: "New".into(),
            starts_after: 7,
            spent_after_cycle: Vec::new(),
            budget: Micros(500_000),
            soft_cap: Micros(400_000),
        };
        let (_, _, pixels) = decode(&burn_down_png(&chart).unwrap());
        assert!(count_colour(&pixels, BUDGET) > 300);
    }

    fn day(d: u32) -> NaiveDate {
        NaiveDate::from_ymd_opt(2026, 11, d).unwrap()
    }

    #[test]
    fn daily_spend_keeps_the_largest_spenders_by_name_and_sums_the_rest() {
        let days: Vec<NaiveDate> = (20..=22).map(day).collect();
        let mut rows = Vec::new();
        for n in 0..10u64 {
            rows.push((format!("agent {n}"), day(21), Micros((n + 1) * 1_000)));
        }
        rows.push(("agent 9".into(), day(22), Micros(5)));
        // A row outside the window is left out.
        rows.push(("agent 0".into(), day(1), Micros(1_000_000)));
        let spend = DailySpend::from_rows(days, &rows);
        let names: Vec<&str> = spend.series.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "agent 9", "agent 8", "agent 7", "agent 6", "agent 5", "agent 4", "agent 3",
                "others"
            ]
        );
        assert_eq!(spend.series[0].1, [Micros(0), Micros(10_000), Micros(5)]);
        assert_eq!(spend.series[7].1, [Micros(0), Micros(6_000), Micros(0)]);
        assert_eq!(spend.day_total(1), Micros(55_000));
    }

    #[test]
    fn a_daily_chart_draws_a_bar_for_each_spender_in_both_panels() {
        let days: Vec<NaiveDate> = (20..=26).map(day).collect();
        let people = DailySpend::from_rows(
            days.clone(),
            &[
                ("alice".into(), day(20), Micros(300_000)),
                ("bob".into(), day(24), Micros(150_000)),
            ],
        );
        let agents = DailySpend::from_rows(days, &[("ChartGPT".into(), day(26), Micros(450_000))]);
        let (width, height, pixels) =
            decode(&daily_spend_png("Spend per day", &people, &agents).unwrap());
        assert_eq!((width, height), (WIDTH, HEIGHT));
        for index in 0..2 {
            let colour = Palette99::pick(index).to_rgba();
            let rgb = RGBColor(colour.0, colour.1, colour.2);
            assert!(
                count_colour(&pixels, rgb) > 500,
                "series {index} has no bar"
            );
        }
    }

    #[test]
    fn an_empty_daily_chart_is_still_an_image() {
        let empty = DailySpend {
            days: vec![day(25), day(26)],
            series: Vec::new(),
        };
        let (width, height, pixels) =
            decode(&daily_spend_png("Nothing spent", &empty, &empty).unwrap());
        assert_eq!((width, height), (WIDTH, HEIGHT));
        assert!(count_colour(&pixels, WHITE) > 0);
        // A window of one day is one bar.
        let one_day =
            DailySpend::from_rows(vec![day(26)], &[("alice".into(), day(26), Micros(10_000))]);
        let (_, _, pixels) = decode(&daily_spend_png("Today", &one_day, &one_day).unwrap());
        let colour = Palette99::pick(0).to_rgba();
        let bar = count_colour(&pixels, RGBColor(colour.0, colour.1, colour.2));
        assert!(bar > 5_000, "{bar}");
    }
}

//! The charts of a flow's page, drawn as SVG on the server: the completion-by-week chart (for
//! each ISO week, the assignments made that week and, over them, how many of those are
//! completed), and horizontal bar charts of one row per module (the funnel, the time per module).
//! The template only places shapes whose geometry is computed here; labels go through its HTML
//! escaping.

/// Drawing area, in SVG user units (the SVG scales to its container).
const WIDTH: f64 = 720.0;
const HEIGHT: f64 = 240.0;
const LEFT: f64 = 44.0;
const RIGHT: f64 = 12.0;
const TOP: f64 = 12.0;
const BOTTOM: f64 = 36.0;

/// One week's figures.
#[derive(Debug, Clone)]
pub struct Week {
    /// ISO week label, e.g. `2026-W47`.
    pub label: String,
    /// Assignments made that week.
    pub total: i64,
    /// Of those, completed.
    pub completed: i64,
}

/// A bar pair as placed on the chart.
#[derive(Debug, Clone)]
pub struct Bar {
    /// Left edge.
    pub x: String,
    pub width: String,
    /// Top of the assignments bar.
    pub total_y: String,
    /// Its height.
    pub total_height: String,
    /// Top of the completed bar.
    pub completed_y: String,
    /// Its height.
    pub completed_height: String,
    /// Centre, for the label.
    pub label_x: String,
    /// Week label (shown on every other bar when crowded).
    pub label: String,
    /// Whether to print the label.
    pub show_label: bool,
    /// Tooltip.
    pub title: String,
}

/// A horizontal grid line with its value.
#[derive(Debug, Clone)]
pub struct GridLine {
    /// Height.
    pub y: String,
    /// Value.
    pub text: String,
}

/// The chart, ready for the template.
#[derive(Debug, Clone)]
pub struct Chart {
    /// SVG `viewBox`.
    pub view_box: String,
    /// Bars, oldest week first.
    pub bars: Vec<Bar>,
    /// Grid lines, bottom up.
    pub grid: Vec<GridLine>,
    /// Left edge of the plot (for the grid lines).
    pub plot_left: String,
    /// Right edge of the plot.
    pub plot_right: String,
    /// Baseline of the bars and labels.
    pub label_y: String,
    /// Whether there is anything to draw.
    pub is_empty: bool,
    /// A sentence describing the chart, for screen readers.
    pub summary: String,
}

fn unit(value: f64) -> String {
    format!("{value:.1}")
}

/// A round step for about four grid lines up to `max`.
fn grid_step(max: i64) -> i64 {
    let rough = (max as f64 / 4.0).max(1.0);
    let magnitude = 10f64.powi(rough.log10().floor() as i32);
    let step = [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|factor| factor * magnitude)
        .find(|step| *step >= rough)
        .unwrap_or(10.0 * magnitude);
    (step as i64).max(1)
}

/// Lays out `weeks` (oldest first).
pub fn completion_by_week(weeks: &[Week]) -> Chart {
    let max = weeks.iter().map(|week| week.total).max().unwrap_or(0);
    let step = grid_step(max);
    let top_value = (max.max(1) + step - 1) / step * step;
    let plot_width = WIDTH - LEFT - RIGHT;
    let plot_height = HEIGHT - TOP - BOTTOM;
    let baseline = TOP + plot_height;
    let slot = plot_width / weeks.len().max(1) as f64;
    let bar_width = (slot * 0.7).min(48.0);
    let every = weeks.len().div_ceil(8).max(1);
    let scale = |value: i64| value as f64 / top_value as f64 * plot_height;
    let bars = weeks
        .iter()
        .enumerate()
        .map(|(index, week)| {
            let x = LEFT + slot * index as f64 + (slot - bar_width) / 2.0;
            let total_height = scale(week.total);
            let completed_height = scale(week.completed.min(week.total));
            let rate = if week.total > 0 {
                week.completed as f64 * 100.0 / week.total as f64
            } else {
                0.0
            };
            Bar {
                x: unit(x),
                width: unit(bar_width),
                total_y: unit(baseline - total_height),
                total_height: unit(total_height),
                completed_y: unit(baseline - completed_height),
                completed_height: unit(completed_height),
                label_x: unit(x + bar_width / 2.0),
                label: week.label.clone(),
                show_label: (weeks.len() - 1 - index).is_multiple_of(every),
                title: format!(
                    "{}: {} assigned, {} completed ({})",
                    week.label,
                    week.total,
                    week.completed,
                    super::view::percent((rate * 10.0).round() / 10.0)
                ),
            }
        })
        .collect();
    let grid = (0..=top_value / step)
        .map(|line| {
            let value = line * step;
            GridLine {
                y: unit(baseline - scale(value)),
                text: super::view::count(value),
            }
        })
        .collect();
    let assigned: i64 = weeks.iter().map(|week| week.total).sum();
    let completed: i64 = weeks.iter().map(|week| week.completed).sum();
    Chart {
        view_box: format!("0 0 {WIDTH} {HEIGHT}"),
        bars,
        grid,
        plot_left: unit(LEFT),
        plot_right: unit(WIDTH - RIGHT),
        label_y: unit(baseline + 18.0),
        is_empty: assigned == 0,
        summary: format!(
            "Over the {} weeks shown, {assigned} assignments were made and {completed} of them are completed.",
            weeks.len()
        ),
    }
}

/// Width of the horizontal bar charts, in SVG user units: narrow, so their text stays legible
/// when the chart shrinks to a phone's width.
const ROWS_WIDTH: f64 = 480.0;
/// Height of one bar of a horizontal chart.
const ROW_BAR: f64 = 12.0;
/// Space between two bars of one row.
const ROW_GAP: f64 = 3.0;
/// Height of a row's label line.
const ROW_LABEL: f64 = 18.0;
/// Space after a row.
const ROW_SPACE: f64 = 10.0;
/// Room kept right of the longest bar for its value.
const ROW_VALUE_ROOM: f64 = 96.0;

/// One value of a row of a horizontal bar chart.
#[derive(Debug, Clone)]
pub struct RowValue {
    /// CSS class of its bar (its colour).
    pub class: &'static str,
    /// What it is, for the tooltip (`Reached`).
    pub name: &'static str,
    /// Its size.
    pub value: f64,
    /// Its text at the end of the bar (`12`, `2 hours`).
    pub text: String,
}

/// One row: a label over one bar per value.
#[derive(Debug, Clone)]
pub struct Row {
    /// The label (a module's name).
    pub label: String,
    pub values: Vec<RowValue>,
}

/// A bar of a horizontal chart as placed.
#[derive(Debug, Clone)]
pub struct RowBar {
    pub class: &'static str,
    pub y: String,
    pub width: String,
    pub height: String,
    /// Where its value is written.
    pub text_x: String,
    pub text_y: String,
    pub text: String,
}

/// A row as placed.
#[derive(Debug, Clone)]
pub struct PlacedRow {
    /// Baseline of the label.
    pub label_y: String,
    pub label: String,
    pub bars: Vec<RowBar>,
    /// Tooltip: the label and every value.
    pub title: String,
}

/// A horizontal bar chart, ready for the template.
#[derive(Debug, Clone)]
pub struct RowsChart {
    /// SVG `viewBox`.
    pub view_box: String,
    pub rows: Vec<PlacedRow>,
    /// Whether every value is zero.
    pub is_empty: bool,
    /// A sentence describing the chart, for screen readers.
    pub summary: String,
}

/// Lays out `rows` top down, every bar on one scale (the largest value fills the width less
/// room for its text). `summary` describes the chart for screen readers.
pub fn rows(rows: &[Row], summary: String) -> RowsChart {
    let max = rows
        .iter()
        .flat_map(|row| row.values.iter().map(|value| value.value))
        .fold(0.0_f64, f64::max);
    let plot = ROWS_WIDTH - ROW_VALUE_ROOM;
    let scale = |value: f64| {
        if max > 0.0 {
            value.max(0.0) / max * plot
        } else {
            0.0
        }
    };
    let mut y = 0.0;
    let placed = rows
        .iter()
        .map(|row| {
            let label_y = y + ROW_LABEL - 5.0;
            y += ROW_LABEL;
            let bars = row
                .values
                .iter()
                .map(|value| {
                    let width = scale(value.value);
                    let bar = RowBar {
                        class: value.class,
                        y: unit(y),
                        width: unit(width),
                        height: unit(ROW_BAR),
                        text_x: unit(width + 4.0),
                        text_y: unit(y + ROW_BAR - 2.0),
                        text: value.text.clone(),
                    };
                    y += ROW_BAR + ROW_GAP;
                    bar
                })
                .collect();
            y += ROW_SPACE - ROW_GAP;
            let values: Vec<String> = row
                .values
                .iter()
                .map(|value| format!("{} {}", value.name, value.text))
                .collect();
            PlacedRow {
                label_y: unit(label_y),
                label: row.label.clone(),
                bars,
                title: format!("{}: {}", row.label, values.join(", ")),
            }
        })
        .collect();
    RowsChart {
        view_box: format!("0 0 {ROWS_WIDTH} {}", unit(y.max(1.0))),
        rows: placed,
        is_empty: max <= 0.0,
        summary,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_scale_to_the_busiest_week_and_completed_never_exceeds_assigned() {
        let weeks = vec![
            Week {
                label: "2026-W01".into(),
                total: 10,
                completed: 5,
            },
            Week {
                label: "2026-W02".into(),
                total: 0,
                completed: 0,
            },
            Week {
                label: "2026-W03".into(),
                total: 20,
                completed: 20,
            },
        ];
        let chart = completion_by_week(&weeks);
        assert_eq!(chart.bars.len(), 3);
        let height = |text: &str| text.parse::<f64>().unwrap();
        assert!(
            (height(&chart.bars[2].total_height) - 2.0 * height(&chart.bars[0].total_height)).abs()
                < 0.2
        );
        assert_eq!(chart.bars[1].total_height, "0.0");
        assert_eq!(chart.bars[2].completed_height, chart.bars[2].total_height);
        assert!(chart.bars[0].title.contains("50%"));
        assert!(!chart.is_empty);
        assert_eq!(chart.grid.first().map(|line| line.text.as_str()), Some("0"));
    }

    #[test]
    fn grid_steps_are_round() {
        assert_eq!(grid_step(0), 1);
        assert_eq!(grid_step(4), 1);
        assert_eq!(grid_step(10), 5);
        assert_eq!(grid_step(100), 50);
        assert_eq!(grid_step(1_000), 500);
    }

    #[test]
    fn horizontal_bars_share_one_scale_and_stack_down() {
        let value = |class, value: f64| RowValue {
            class,
            name: class,
            value,
            text: format!("{value}"),
        };
        let chart = rows(
            &[
                Row {
                    label: "One".into(),
                    values: vec![value("reached", 10.0), value("completed", 5.0)],
                },
                Row {
                    label: "Two".into(),
                    values: vec![value("reached", 0.0), value("completed", 0.0)],
                },
            ],
            "summary".into(),
        );
        let number = |text: &str| text.parse::<f64>().unwrap();
        let first = &chart.rows[0];
        assert_eq!(number(&first.bars[0].width), ROWS_WIDTH - ROW_VALUE_ROOM);
        assert!((number(&first.bars[1].width) * 2.0 - number(&first.bars[0].width)).abs() < 0.2);
        assert_eq!(chart.rows[1].bars[0].width, "0.0");
        assert!(number(&chart.rows[1].label_y) > number(&first.bars[1].y));
        assert_eq!(first.title, "One: reached 10, completed 5");
        assert!(!chart.is_empty);
        assert!(rows(&[], String::new()).is_empty);
    }
}

//! The completion-by-week chart of a flow's page, drawn as SVG on the server: for each ISO week,
//! the assignments made that week and, over them, how many of those are completed. The template
//! only places shapes whose geometry is computed here; labels go through its HTML escaping.

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
}

//! UTC calendar dates of Unix times (SOURCE_DATE_EPOCH), without a date
//! crate: zip entry times and apt's `Release` date.

/// UTC calendar fields of a Unix time: year, month, day, hour, minute, second.
pub fn civil(epoch: u64) -> (i64, u32, u32, u32, u32, u32) {
    let days = (epoch / 86_400) as i64;
    let secs = epoch % 86_400;
    // Howard Hinnant's days-to-civil.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = if m <= 2 { y + 1 } else { y };
    (
        y,
        m,
        d,
        (secs / 3600) as u32,
        ((secs % 3600) / 60) as u32,
        (secs % 60) as u32,
    )
}

/// RFC 2822 date in UTC (`Mon, 01 Jan 2024 00:00:00 UTC`), as apt's Release.
pub fn rfc2822(epoch: u64) -> String {
    let (y, m, d, h, mi, s) = civil(epoch);
    let days = (epoch / 86_400) as i64;
    let wd = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    let mon = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    format!(
        "{}, {d:02} {} {y} {h:02}:{mi:02}:{s:02} UTC",
        wd.get(days.rem_euclid(7) as usize)
            .copied()
            .unwrap_or("Thu"),
        mon.get((m as usize).saturating_sub(1))
            .copied()
            .unwrap_or("Jan")
    )
}

/// ISO 8601 UTC (`2024-01-01T00:00:00Z`).
pub fn iso8601(epoch: u64) -> String {
    let (y, m, d, h, mi, s) = civil(epoch);
    format!("{y:04}-{m:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates() {
        assert_eq!(civil(0), (1970, 1, 1, 0, 0, 0));
        assert_eq!(civil(1_704_067_200), (2024, 1, 1, 0, 0, 0));
        assert_eq!(rfc2822(1_704_067_200), "Mon, 01 Jan 2024 00:00:00 UTC");
        assert_eq!(iso8601(951_782_400), "2000-02-29T00:00:00Z");
    }
}

//! Proleptic Gregorian dates as day numbers (days since 1970-01-01), for the probe's date
//! questions: the answers are computed here, not written by hand.

/// A calendar date.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Date {
    pub year: i32,
    pub month: u32,
    pub day: u32,
}

pub const WEEKDAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];

impl Date {
    /// Days since 1970-01-01 (negative before it).
    pub fn day_number(self) -> i64 {
        let y = i64::from(self.year) - i64::from(self.month <= 2);
        let era = y.div_euclid(400);
        let year_of_era = y - era * 400;
        let m = i64::from(self.month);
        let day_of_year =
            (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + i64::from(self.day) - 1;
        let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
        era * 146_097 + day_of_era - 719_468
    }

    /// The date of a day number.
    pub fn from_day_number(days: i64) -> Date {
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let day_of_era = z - era * 146_097;
        let year_of_era =
            (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
        let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
        let mp = (5 * day_of_year + 2) / 153;
        let day = (day_of_year - (153 * mp + 2) / 5 + 1) as u32;
        let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
        let year = (year_of_era + era * 400 + i64::from(month <= 2)) as i32;
        Date { year, month, day }
    }

    pub fn plus_days(self, days: i64) -> Date {
        Date::from_day_number(self.day_number() + days)
    }

    /// Its weekday's name in English.
    pub fn weekday(self) -> &'static str {
        // 1970-01-01 was a Thursday (index 3 from Monday).
        WEEKDAYS[(self.day_number() + 3).rem_euclid(7) as usize]
    }

    pub fn days_in_month(year: i32, month: u32) -> u32 {
        let next = if month == 12 {
            Date {
                year: year + 1,
                month: 1,
                day: 1,
            }
        } else {
            Date {
                year,
                month: month + 1,
                day: 1,
            }
        };
        let first = Date {
            year,
            month,
            day: 1,
        };
        (next.day_number() - first.day_number()) as u32
    }

    /// `YYYY-MM-DD`.
    pub fn iso(self) -> String {
        format!("{:04}-{:02}-{:02}", self.year, self.month, self.day)
    }

    /// A date written `YYYY-MM-DD` that exists.
    pub fn parse_iso(text: &str) -> Option<Date> {
        let mut parts = text.split('-');
        let (y, m, d) = (parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() || y.len() != 4 || m.len() != 2 || d.len() != 2 {
            return None;
        }
        let date = Date {
            year: y.parse().ok()?,
            month: m.parse().ok()?,
            day: d.parse().ok()?,
        };
        let valid = (1..=12).contains(&date.month)
            && (1..=Date::days_in_month(date.year, date.month)).contains(&date.day);
        valid.then_some(date)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn date(text: &str) -> Date {
        Date::parse_iso(text).expect("a date")
    }

    #[test]
    fn day_numbers_weekdays_and_leap_years_are_right() {
        assert_eq!(date("1970-01-01").day_number(), 0);
        assert_eq!(date("2000-03-01").day_number(), 11_017);
        assert_eq!(date("1969-12-31").day_number(), -1);
        assert_eq!(date("1970-01-01").weekday(), "Thursday");
        assert_eq!(date("2000-01-01").weekday(), "Saturday");
        assert_eq!(date("2024-07-04").weekday(), "Thursday");
        assert_eq!(date("2024-02-28").plus_days(1).iso(), "2024-02-29");
        assert_eq!(date("2023-02-28").plus_days(1).iso(), "2023-03-01");
        assert_eq!(date("1900-02-28").plus_days(1).iso(), "1900-03-01");
        assert_eq!(date("2000-02-28").plus_days(1).iso(), "2000-02-29");
        assert_eq!(date("2023-12-31").plus_days(1).iso(), "2024-01-01");
        assert_eq!(date("2024-03-01").plus_days(-1).iso(), "2024-02-29");
        for n in -800_000..800_000 {
            if n % 997 == 0 {
                assert_eq!(Date::from_day_number(n).day_number(), n);
            }
        }
    }

    #[test]
    fn only_real_dates_in_iso_form_parse() {
        assert_eq!(Date::parse_iso("2023-02-29"), None);
        assert_eq!(Date::parse_iso("2024-13-01"), None);
        assert_eq!(Date::parse_iso("2024-1-01"), None);
        assert_eq!(Date::parse_iso("01/02/2024"), None);
        assert!(Date::parse_iso("2024-02-29").is_some());
    }
}

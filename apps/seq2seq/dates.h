// The seq2seq demo's task, generated from a seed (no download): a date
// written in one of many human formats ("3 May 1999", "05/03/99",
// "Monday, May 3rd 1999", "03.05.1999", ...) is to be rewritten in ISO form,
// "1999-05-03", character by character.
//
// Dates are drawn uniformly from 1950-01-01 to 2049-12-31, so a two-digit
// year is unambiguous (50-99 -> 19xx, 00-49 -> 20xx). Slash formats are
// month first (US: 05/03/99 is May 3rd); dot formats are day first
// (European: 03.05.1999). Weekday names are always the true weekday.
//
// Random choices use std::mt19937_64's raw output (its sequence is fixed by
// the standard, unlike the std distributions), so a seed gives the same
// data on every platform.
#pragma once

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <random>
#include <set>
#include <string>
#include <unordered_set>
#include <vector>

namespace dates {

struct Date {
  int year, month, day;  // month 1-12, day 1-31
  int weekday;           // 0 = Monday
};

// Days since 1970-01-01 -> civil date (H. Hinnant's days_from_civil inverse).
inline Date from_days(int64_t z) {
  z += 719468;
  const int64_t era = (z >= 0 ? z : z - 146096) / 146097;
  const int64_t doe = z - era * 146097;
  const int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  const int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const int64_t mp = (5 * doy + 2) / 153;
  const int d = static_cast<int>(doy - (153 * mp + 2) / 5 + 1);
  const int m = static_cast<int>(mp < 10 ? mp + 3 : mp - 9);
  const int y = static_cast<int>(yoe + era * 400 + (m <= 2));
  // 1970-01-01 was a Thursday (weekday 3 with Monday = 0).
  const int wd = static_cast<int>(((z - 719468) % 7 + 7 + 3) % 7);
  return {y, m, d, wd};
}

inline int64_t to_days(int y, int m, int d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const int64_t yoe = y - era * 400;
  const int64_t doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
  const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

inline const std::array<const char*, 12> kMonths = {"January",   "February", "March",    "April",
                                                    "May",       "June",     "July",     "August",
                                                    "September", "October",  "November", "December"};
inline const std::array<const char*, 7> kWeekdays = {"Monday", "Tuesday",  "Wednesday", "Thursday",
                                                     "Friday", "Saturday", "Sunday"};

inline std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}
inline std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}
inline std::string two(int v) {
  char b[8];
  std::snprintf(b, sizeof b, "%02d", v % 100);
  return b;
}
inline std::string ordinal(int d) {  // 1st 2nd 3rd 4th ... 11th 12th 13th ... 21st 22nd 23rd
  const char* sfx = (d % 100 >= 11 && d % 100 <= 13) ? "th"
                    : d % 10 == 1                    ? "st"
                    : d % 10 == 2                    ? "nd"
                    : d % 10 == 3                    ? "rd"
                                                     : "th";
  return std::to_string(d) + sfx;
}

inline std::string iso(const Date& d) { return std::to_string(d.year) + "-" + two(d.month) + "-" + two(d.day); }

constexpr int kNumFormats = 20;

// Format f of date d.
inline std::string format(const Date& d, int f) {
  const std::string M = kMonths[d.month - 1], Mon = M.substr(0, 3), W = kWeekdays[d.weekday], Wd = W.substr(0, 3);
  const std::string day = std::to_string(d.day), mon = std::to_string(d.month), Y = std::to_string(d.year);
  const std::string yy = two(d.year);
  switch (f) {
    case 0:
      return day + " " + M + " " + Y;  // 3 May 1999
    case 1:
      return two(d.day) + " " + M + " " + Y;  // 03 May 1999
    case 2:
      return M + " " + day + ", " + Y;  // May 3, 1999
    case 3:
      return M + " " + ordinal(d.day) + " " + Y;  // May 3rd 1999
    case 4:
      return W + ", " + M + " " + ordinal(d.day) + " " + Y;  // Monday, May 3rd 1999
    case 5:
      return Wd + ", " + day + " " + Mon + " " + Y;  // Mon, 3 May 1999
    case 6:
      return two(d.month) + "/" + two(d.day) + "/" + yy;  // 05/03/99 (US: month first)
    case 7:
      return mon + "/" + day + "/" + Y;  // 5/3/1999
    case 8:
      return two(d.day) + "." + two(d.month) + "." + Y;  // 03.05.1999 (day first)
    case 9:
      return day + " " + lower(Mon) + " " + yy;  // 3 may 99
    case 10:
      return upper(M) + " " + day + ", " + Y;  // MAY 3, 1999
    case 11:
      return ordinal(d.day) + " of " + M + ", " + Y;  // 3rd of May, 1999
    case 12:
      return iso(d);  // 1999-05-03
    case 13:
      return W + " " + day + " " + M + " " + Y;  // Monday 3 May 1999
    case 14:
      return Mon + " " + two(d.day) + " " + Y;  // May 03 1999
    case 15:
      return day + "-" + Mon + "-" + yy;  // 3-May-99
    case 16:
      return Y + two(d.month) + two(d.day);  // 19990503
    case 17:
      return Y + "/" + two(d.month) + "/" + two(d.day);  // 1999/05/03
    case 18:
      return lower(Wd) + " " + lower(Mon) + " " + day + " " + Y;  // mon may 3 1999
    default:
      return upper(Mon) + " " + two(d.day) + " " + yy;  // MAY 03 99
  }
}

struct Example {
  std::string source, target;
};

struct Splits {
  std::vector<Example> train, val, test;
};

// Distinct source strings across the three splits (a test string never
// appears in training).
inline Splits make_splits(uint64_t seed, size_t n_train, size_t n_val, size_t n_test) {
  std::mt19937_64 rng(seed);
  const int64_t first = to_days(1950, 1, 1), span = to_days(2049, 12, 31) - first + 1;
  std::unordered_set<std::string> seen;
  auto fill = [&](std::vector<Example>& out, size_t n) {
    while (out.size() < n) {
      const Date d = from_days(first + static_cast<int64_t>(rng() % static_cast<uint64_t>(span)));
      const std::string src = format(d, static_cast<int>(rng() % kNumFormats));
      if (seen.insert(src).second) out.push_back({src, iso(d)});
    }
  };
  Splits s;
  fill(s.train, n_train);
  fill(s.val, n_val);
  fill(s.test, n_test);
  return s;
}

// Every character any format can produce, sorted: every day of a leap year
// in every format covers all months, weekdays, day numbers and digits.
inline std::string alphabet() {
  std::set<char> cs;
  for (int64_t t = to_days(2000, 1, 1); t <= to_days(2000, 12, 31); ++t)
    for (int f = 0; f < kNumFormats; ++f)
      for (char c : format(from_days(t), f)) cs.insert(c);
  for (char c = '0'; c <= '9'; ++c) cs.insert(c);
  return std::string(cs.begin(), cs.end());
}

// The longest source any format can produce (weekday and month names at
// their longest).
inline size_t max_source_length() {
  size_t n = 0;
  for (int64_t t = to_days(2000, 1, 1); t <= to_days(2000, 12, 31); ++t)
    for (int f = 0; f < kNumFormats; ++f) n = std::max(n, format(from_days(t), f).size());
  return n;
}

}  // namespace dates

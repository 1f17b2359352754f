// A one-line progress bar for the training loops, drawn only when stdout is a
// terminal (logs and CI output stay clean):
//   epoch  12/200 [##########..........]  8/16  loss 0.01234
#pragma once

#include <unistd.h>

#include <cstdio>
#include <string>

namespace ember::app {

class ProgressBar {
 public:
  explicit ProgressBar(bool enabled) : on_(enabled && isatty(fileno(stdout))) {}

  void update(const std::string& prefix, long done, long total, const std::string& suffix) {
    if (!on_ || total <= 0) return;
    constexpr int kWidth = 24;
    const int fill = static_cast<int>(kWidth * done / total);
    std::string bar(static_cast<size_t>(fill), '#');
    bar.append(static_cast<size_t>(kWidth - fill), '.');
    std::printf("\r%s [%s] %ld/%ld %s\033[K", prefix.c_str(), bar.c_str(), done, total, suffix.c_str());
    std::fflush(stdout);
    drawn_ = true;
  }
  // Erases the bar so that the next line prints over it.
  void clear() {
    if (!drawn_) return;
    std::printf("\r\033[K");
    std::fflush(stdout);
    drawn_ = false;
  }

 private:
  bool on_;
  bool drawn_ = false;
};

}  // namespace ember::app

// SPDX-License-Identifier: MIT
/// \file
/// Command-line options of the examples: `--name value` pairs with integer ranges (or free
/// text), `--help`. A bad argument prints one line to stderr and exits with status 2.
#pragma once

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace example {

class args {
 public:
  args(const char* program, const char* what) : program_(program), what_(what) {}

  /// An integer option in [lo, hi] (default: the variable's current value).
  args& integer(const char* name, long& value, long lo, long hi, const char* help) {
    opts_.push_back({name, help, &value, nullptr, lo, hi});
    return *this;
  }
  /// A text option (e.g. a file name); empty means unset.
  args& text(const char* name, std::string& value, const char* help) {
    opts_.push_back({name, help, nullptr, &value, 0, 0});
    return *this;
  }

  void parse(int argc, char** argv) const {
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "--help" || a == "-h") usage(stdout), std::exit(0);
      const opt* o = find(a);
      if (!o) fail("unknown argument '" + a + "'");
      if (i + 1 >= argc) fail(a + " needs a value");
      const char* v = argv[++i];
      if (o->text) {
        *o->text = v;
        continue;
      }
      char* end = nullptr;
      errno = 0;
      const long x = std::strtol(v, &end, 10);
      if (errno || end == v || *end != '\0') fail(a + " takes a whole number, got '" + v + "'");
      if (x < o->lo || x > o->hi)
        fail(a + " is " + v + ", expected " + std::to_string(o->lo) + ".." + std::to_string(o->hi));
      *o->integer = x;
    }
  }

 private:
  struct opt {
    const char* name;
    const char* help;
    long* integer;
    std::string* text;
    long lo, hi;
  };
  const opt* find(const std::string& a) const {
    for (const auto& o : opts_)
      if (a == std::string("--") + o.name) return &o;
    return nullptr;
  }
  [[noreturn]] void fail(const std::string& msg) const {
    std::fprintf(stderr, "%s: %s (see --help)\n", program_, msg.c_str());
    std::exit(2);
  }
  void usage(std::FILE* f) const {
    std::fprintf(f, "%s: %s\nOptions:\n", program_, what_);
    for (const auto& o : opts_) {
      if (o.integer)
        std::fprintf(f, "  --%-10s N  %s (%ld..%ld, default %ld)\n", o.name, o.help, o.lo, o.hi, *o.integer);
      else
        std::fprintf(f, "  --%-10s F  %s%s%s\n", o.name, o.help, o.text->empty() ? "" : ", default ", o.text->c_str());
    }
    std::fprintf(f, "  --help         this text\n");
  }
  const char* program_;
  const char* what_;
  std::vector<opt> opts_;
};

}  // namespace example

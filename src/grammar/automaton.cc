// Automaton::Build: Thompson construction per rule, epsilon removal, pruning of what cannot
// complete, and the left-recursion check (automaton.h).
#include "grammar/automaton.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "grammar/utf8.h"

namespace kvtier::grammar {

class AutomatonBuilder {
 public:
  AutomatonBuilder(const Grammar& grammar, const AutomatonLimits& limits) : grammar_(grammar), limits_(limits) {}

  absl::StatusOr<std::shared_ptr<const Automaton>> Build() {
    const int32_t num_rules = static_cast<int32_t>(grammar_.rules().size());
    if (num_rules == 0) return absl::InvalidArgumentError("the grammar has no rules");
    // 1. An NFA with epsilon edges for every rule the root reaches.
    std::vector<int32_t> rules = ReachableRules();
    entry_.assign(static_cast<size_t>(num_rules), -1);
    final_.assign(static_cast<size_t>(num_rules), -1);
    for (int32_t r : rules) {
      entry_[static_cast<size_t>(r)] = NewState(r);
      current_rule_ = r;
      final_[static_cast<size_t>(r)] = Emit(grammar_.rules()[static_cast<size_t>(r)].body, entry_[static_cast<size_t>(r)]);
      if (!status_.ok()) return status_;
    }
    // 2. Without epsilons, 3. without what cannot complete, 4. no left recursion.
    if (absl::Status s = RemoveEpsilons(); !s.ok()) return s;
    if (absl::Status s = PruneUnproductive(); !s.ok()) return s;
    if (absl::Status s = CheckLeftRecursion(); !s.ok()) return s;
    return Flatten();
  }

 private:
  struct RawEdge {
    uint8_t lo, hi;
    int32_t target;
  };
  struct RawState {
    int32_t rule = 0;
    std::vector<int32_t> eps;
    std::vector<RawEdge> bytes;
    std::vector<Automaton::Call> calls;
  };
  struct Draft {
    int32_t rule = 0;
    bool accept = false;
    std::vector<Automaton::ByteEdge> edges;
    std::vector<Automaton::Call> calls;
  };

  std::vector<int32_t> ReachableRules() const {
    std::vector<bool> seen(grammar_.rules().size(), false);
    std::vector<int32_t> order, stack = {grammar_.root()};
    seen[static_cast<size_t>(grammar_.root())] = true;
    while (!stack.empty()) {
      const int32_t r = stack.back();
      stack.pop_back();
      order.push_back(r);
      std::vector<const Expr*> exprs = {&grammar_.rules()[static_cast<size_t>(r)].body};
      while (!exprs.empty()) {
        const Expr* e = exprs.back();
        exprs.pop_back();
        if (e->kind == Expr::Kind::kRuleRef && !seen[static_cast<size_t>(e->rule)]) {
          seen[static_cast<size_t>(e->rule)] = true;
          stack.push_back(e->rule);
        }
        for (const Expr& item : e->items) exprs.push_back(&item);
      }
    }
    return order;
  }

  int32_t NewState(int32_t rule) {
    if (static_cast<int32_t>(raw_.size()) >= limits_.max_nodes) {
      if (status_.ok()) {
        status_ = absl::InvalidArgumentError(
            absl::StrCat("the grammar is too large: more than ", limits_.max_nodes, " automaton states"));
      }
      return 0;
    }
    raw_.push_back(RawState{rule, {}, {}, {}});
    return static_cast<int32_t>(raw_.size() - 1);
  }

  int32_t Emit(const Expr& e, int32_t entry) {
    if (!status_.ok()) return entry;
    switch (e.kind) {
      case Expr::Kind::kEmpty:
        return entry;
      case Expr::Kind::kLiteral:
        for (char c : e.literal) {
          const int32_t s = NewState(current_rule_);
          if (!status_.ok()) return entry;
          const auto b = static_cast<uint8_t>(c);
          raw_[static_cast<size_t>(entry)].bytes.push_back({b, b, s});
          entry = s;
        }
        return entry;
      case Expr::Kind::kCharClass:
        return EmitClass(e.ranges, entry);
      case Expr::Kind::kRuleRef: {
        const int32_t s = NewState(current_rule_);
        raw_[static_cast<size_t>(entry)].calls.push_back({e.rule, s});
        return s;
      }
      case Expr::Kind::kSequence:
        for (const Expr& item : e.items) entry = Emit(item, entry);
        return entry;
      case Expr::Kind::kChoice: {
        const int32_t exit = NewState(current_rule_);
        for (const Expr& item : e.items) {
          const int32_t s = NewState(current_rule_);
          if (!status_.ok()) return entry;
          raw_[static_cast<size_t>(entry)].eps.push_back(s);
          const int32_t end = Emit(item, s);
          if (!status_.ok()) return entry;
          raw_[static_cast<size_t>(end)].eps.push_back(exit);
        }
        return exit;
      }
      case Expr::Kind::kRepeat: {
        const Expr& item = e.items[0];
        int32_t cur = entry;
        for (int32_t i = 0; i < e.min && status_.ok(); ++i) cur = Emit(item, cur);
        if (!status_.ok()) return entry;
        if (!e.max.has_value()) {
          // A fresh loop state: the body runs from it and returns to it.
          const int32_t loop = NewState(current_rule_);
          if (!status_.ok()) return entry;
          raw_[static_cast<size_t>(cur)].eps.push_back(loop);
          const int32_t end = Emit(item, loop);
          if (!status_.ok()) return entry;
          raw_[static_cast<size_t>(end)].eps.push_back(loop);
          return loop;
        }
        const int32_t exit = NewState(current_rule_);
        if (!status_.ok()) return entry;
        raw_[static_cast<size_t>(cur)].eps.push_back(exit);
        for (int32_t i = e.min; i < *e.max && status_.ok(); ++i) {
          cur = Emit(item, cur);
          if (!status_.ok()) return entry;
          raw_[static_cast<size_t>(cur)].eps.push_back(exit);
        }
        return exit;
      }
    }
    return entry;
  }

  // The UTF-8 byte sequences of the class, sharing states where sequences start with the
  // same byte ranges.
  int32_t EmitClass(const std::vector<CodepointRange>& ranges, int32_t entry) {
    const int32_t exit = NewState(current_rule_);
    std::vector<Utf8Sequence> seqs;
    for (const CodepointRange& r : ranges) Utf8Sequences(r.lo, r.hi, &seqs);
    std::map<std::tuple<int32_t, uint8_t, uint8_t>, int32_t> inner;
    for (const Utf8Sequence& seq : seqs) {
      int32_t cur = entry;
      for (size_t i = 0; i < seq.size() && status_.ok(); ++i) {
        if (i + 1 == seq.size()) {
          raw_[static_cast<size_t>(cur)].bytes.push_back({seq[i].lo, seq[i].hi, exit});
          break;
        }
        auto key = std::make_tuple(cur, seq[i].lo, seq[i].hi);
        auto it = inner.find(key);
        if (it != inner.end()) {
          cur = it->second;
          continue;
        }
        const int32_t s = NewState(current_rule_);
        if (!status_.ok()) return exit;
        raw_[static_cast<size_t>(cur)].bytes.push_back({seq[i].lo, seq[i].hi, s});
        inner.emplace(key, s);
        cur = s;
      }
    }
    return exit;
  }

  // Drafts for the states an edge or call enters (and rule entries), reachable from the
  // root, each with the edges of every state its epsilon closure holds.
  absl::Status RemoveEpsilons() {
    int64_t work = 0;
    std::vector<int32_t> draft_of(raw_.size(), -1);
    std::vector<int32_t> queue;
    auto id = [&](int32_t raw) {
      if (draft_of[static_cast<size_t>(raw)] < 0) {
        draft_of[static_cast<size_t>(raw)] = static_cast<int32_t>(drafts_.size());
        drafts_.push_back(Draft{raw_[static_cast<size_t>(raw)].rule, false, {}, {}});
        queue.push_back(raw);
      }
      return draft_of[static_cast<size_t>(raw)];
    };
    starts_.assign(grammar_.rules().size(), -1);
    starts_[static_cast<size_t>(grammar_.root())] = id(entry_[static_cast<size_t>(grammar_.root())]);
    std::vector<uint32_t> mark(raw_.size(), 0);
    uint32_t stamp = 0;
    std::vector<int32_t> closure, stack;
    for (size_t q = 0; q < queue.size(); ++q) {
      const int32_t raw = queue[q];
      const int32_t d = draft_of[static_cast<size_t>(raw)];
      ++stamp;
      closure.clear();
      stack.assign(1, raw);
      mark[static_cast<size_t>(raw)] = stamp;
      while (!stack.empty()) {
        const int32_t s = stack.back();
        stack.pop_back();
        closure.push_back(s);
        for (int32_t t : raw_[static_cast<size_t>(s)].eps) {
          if (mark[static_cast<size_t>(t)] != stamp) {
            mark[static_cast<size_t>(t)] = stamp;
            stack.push_back(t);
          }
        }
      }
      work += static_cast<int64_t>(closure.size());
      if (work > limits_.max_closure_work) {
        return absl::InvalidArgumentError("the grammar is too large (its empty-string closures exceed the work limit)");
      }
      const int32_t rule = raw_[static_cast<size_t>(raw)].rule;
      for (int32_t s : closure) {
        const RawState& state = raw_[static_cast<size_t>(s)];
        if (s == final_[static_cast<size_t>(rule)]) drafts_[static_cast<size_t>(d)].accept = true;
        for (const RawEdge& e : state.bytes) {
          const int32_t target = id(e.target);
          drafts_[static_cast<size_t>(d)].edges.push_back({e.lo, e.hi, target});
        }
        for (const Automaton::Call& c : state.calls) {
          if (starts_[static_cast<size_t>(c.rule)] < 0) {
            starts_[static_cast<size_t>(c.rule)] = id(entry_[static_cast<size_t>(c.rule)]);
          }
          const int32_t next = id(c.next);
          drafts_[static_cast<size_t>(d)].calls.push_back({c.rule, next});
        }
      }
    }
    raw_.clear();
    raw_.shrink_to_fit();
    for (Draft& d : drafts_) Canonicalize(&d);
    return absl::OkStatus();
  }

  // Sorted, duplicate-free edges; adjacent ranges into one target merged.
  static void Canonicalize(Draft* d) {
    auto by_lo = [](const Automaton::ByteEdge& a, const Automaton::ByteEdge& b) {
      return std::tie(a.target, a.lo, a.hi) < std::tie(b.target, b.lo, b.hi);
    };
    std::sort(d->edges.begin(), d->edges.end(), by_lo);
    std::vector<Automaton::ByteEdge> merged;
    for (const Automaton::ByteEdge& e : d->edges) {
      if (!merged.empty() && merged.back().target == e.target && e.lo <= merged.back().hi + 1) {
        merged.back().hi = std::max(merged.back().hi, e.hi);
      } else {
        merged.push_back(e);
      }
    }
    std::sort(merged.begin(), merged.end(), [](const auto& a, const auto& b) { return a.lo < b.lo; });
    d->edges = std::move(merged);
    std::sort(d->calls.begin(), d->calls.end(),
              [](const auto& a, const auto& b) { return std::tie(a.rule, a.next) < std::tie(b.rule, b.next); });
    d->calls.erase(std::unique(d->calls.begin(), d->calls.end(),
                               [](const auto& a, const auto& b) { return a.rule == b.rule && a.next == b.next; }),
                   d->calls.end());
  }

  // Keeps only edges into nodes that can still reach their rule's end, and calls of rules
  // that can end; a root that cannot end matches nothing.
  absl::Status PruneUnproductive() {
    const size_t n = drafts_.size();
    std::vector<bool> productive(n, false);
    std::vector<std::vector<int32_t>> rev(n);
    std::vector<std::vector<int32_t>> callers(grammar_.rules().size());
    for (size_t s = 0; s < n; ++s) {
      for (const auto& e : drafts_[s].edges) rev[static_cast<size_t>(e.target)].push_back(static_cast<int32_t>(s));
      for (const auto& c : drafts_[s].calls) {
        rev[static_cast<size_t>(c.next)].push_back(static_cast<int32_t>(s));
        callers[static_cast<size_t>(c.rule)].push_back(static_cast<int32_t>(s));
      }
    }
    auto rule_productive = [&](int32_t rule) {
      const int32_t st = starts_[static_cast<size_t>(rule)];
      return st >= 0 && productive[static_cast<size_t>(st)];
    };
    auto check = [&](size_t s) {
      const Draft& d = drafts_[s];
      if (d.accept) return true;
      for (const auto& e : d.edges) {
        if (productive[static_cast<size_t>(e.target)]) return true;
      }
      for (const auto& c : d.calls) {
        if (productive[static_cast<size_t>(c.next)] && rule_productive(c.rule)) return true;
      }
      return false;
    };
    std::vector<int32_t> work;
    for (size_t s = 0; s < n; ++s) {
      if (drafts_[s].accept) {
        productive[s] = true;
        work.push_back(static_cast<int32_t>(s));
      }
    }
    while (!work.empty()) {
      const auto t = static_cast<size_t>(work.back());
      work.pop_back();
      auto visit = [&](int32_t s) {
        if (!productive[static_cast<size_t>(s)] && check(static_cast<size_t>(s))) {
          productive[static_cast<size_t>(s)] = true;
          work.push_back(s);
        }
      };
      for (int32_t s : rev[t]) visit(s);
      // t may be a rule's start: its call sites may now be productive.
      const int32_t rule = drafts_[t].rule;
      if (starts_[static_cast<size_t>(rule)] == static_cast<int32_t>(t)) {
        for (int32_t s : callers[static_cast<size_t>(rule)]) visit(s);
      }
    }
    if (!productive[static_cast<size_t>(starts_[static_cast<size_t>(grammar_.root())])]) {
      return absl::InvalidArgumentError(absl::StrCat("the grammar matches no text: rule '",
                                                     grammar_.rules()[static_cast<size_t>(grammar_.root())].name,
                                                     "' can never be completed"));
    }
    for (Draft& d : drafts_) {
      std::erase_if(d.edges, [&](const auto& e) { return !productive[static_cast<size_t>(e.target)]; });
      std::erase_if(d.calls, [&](const auto& c) {
        return !productive[static_cast<size_t>(c.next)] || !rule_productive(c.rule);
      });
    }
    return absl::OkStatus();
  }

  // Left recursion: a rule that can call itself (through other rules) before reading a
  // byte would make the parse stack grow without end.
  absl::Status CheckLeftRecursion() {
    const size_t num_rules = grammar_.rules().size();
    // Nullable rules: their start reaches an accepting node through calls of nullable
    // rules only. Iterated to a fixed point.
    std::vector<bool> nullable(num_rules, false);
    std::vector<int32_t> stack;
    std::vector<uint32_t> mark(drafts_.size(), 0);
    uint32_t stamp = 0;
    // Visits the nodes a rule's start reaches without reading; calls fn(node) for each.
    auto zero_byte_walk = [&](int32_t rule, const auto& fn) {
      ++stamp;
      stack.assign(1, starts_[static_cast<size_t>(rule)]);
      mark[static_cast<size_t>(stack[0])] = stamp;
      while (!stack.empty()) {
        const int32_t s = stack.back();
        stack.pop_back();
        fn(s);
        for (const auto& c : drafts_[static_cast<size_t>(s)].calls) {
          if (nullable[static_cast<size_t>(c.rule)] && mark[static_cast<size_t>(c.next)] != stamp) {
            mark[static_cast<size_t>(c.next)] = stamp;
            stack.push_back(c.next);
          }
        }
      }
    };
    std::vector<int32_t> rules;
    for (size_t r = 0; r < num_rules; ++r) {
      if (starts_[r] >= 0) rules.push_back(static_cast<int32_t>(r));
    }
    for (bool changed = true; changed;) {
      changed = false;
      for (auto it = rules.rbegin(); it != rules.rend(); ++it) {
        if (nullable[static_cast<size_t>(*it)]) continue;
        bool accepts = false;
        zero_byte_walk(*it, [&](int32_t s) { accepts = accepts || drafts_[static_cast<size_t>(s)].accept; });
        if (accepts) {
          nullable[static_cast<size_t>(*it)] = true;
          changed = true;
        }
      }
    }
    std::vector<std::vector<int32_t>> left_calls(num_rules);
    for (int32_t r : rules) {
      zero_byte_walk(r, [&](int32_t s) {
        for (const auto& c : drafts_[static_cast<size_t>(s)].calls) left_calls[static_cast<size_t>(r)].push_back(c.rule);
      });
      auto& v = left_calls[static_cast<size_t>(r)];
      std::sort(v.begin(), v.end());
      v.erase(std::unique(v.begin(), v.end()), v.end());
    }
    // Cycle search (iterative DFS, colors: 0 new, 1 on the path, 2 done).
    std::vector<uint8_t> color(num_rules, 0);
    std::vector<std::pair<int32_t, size_t>> path;
    for (int32_t r : rules) {
      if (color[static_cast<size_t>(r)] != 0) continue;
      path.assign(1, {r, 0});
      color[static_cast<size_t>(r)] = 1;
      while (!path.empty()) {
        const int32_t rule = path.back().first;
        const auto& out = left_calls[static_cast<size_t>(rule)];
        if (path.back().second == out.size()) {
          color[static_cast<size_t>(rule)] = 2;
          path.pop_back();
          continue;
        }
        const int32_t callee = out[path.back().second++];
        if (color[static_cast<size_t>(callee)] == 1) {
          std::vector<std::string> names;
          bool in_cycle = false;
          for (const auto& step : path) {
            in_cycle = in_cycle || step.first == callee;
            if (in_cycle) names.push_back(grammar_.rules()[static_cast<size_t>(step.first)].name);
          }
          names.push_back(grammar_.rules()[static_cast<size_t>(callee)].name);
          return absl::InvalidArgumentError(
              absl::StrCat("left recursion is not supported: ", absl::StrJoin(names, " -> ")));
        }
        if (color[static_cast<size_t>(callee)] == 0) {
          color[static_cast<size_t>(callee)] = 1;
          path.push_back({callee, 0});
        }
      }
    }
    return absl::OkStatus();
  }

  // The drafts reachable from the root after pruning, renumbered into flat arrays.
  std::shared_ptr<const Automaton> Flatten() {
    std::vector<int32_t> new_id(drafts_.size(), -1);
    std::vector<int32_t> order;
    auto visit = [&](int32_t d) {
      if (new_id[static_cast<size_t>(d)] < 0) {
        new_id[static_cast<size_t>(d)] = static_cast<int32_t>(order.size());
        order.push_back(d);
      }
    };
    visit(starts_[static_cast<size_t>(grammar_.root())]);
    for (size_t i = 0; i < order.size(); ++i) {
      const Draft& d = drafts_[static_cast<size_t>(order[i])];
      for (const auto& e : d.edges) visit(e.target);
      for (const auto& c : d.calls) {
        visit(starts_[static_cast<size_t>(c.rule)]);
        visit(c.next);
      }
    }
    auto a = std::shared_ptr<Automaton>(new Automaton());
    a->root_ = grammar_.root();
    a->starts_.assign(grammar_.rules().size(), -1);
    for (size_t r = 0; r < starts_.size(); ++r) {
      if (starts_[r] >= 0 && new_id[static_cast<size_t>(starts_[r])] >= 0) a->starts_[r] = new_id[static_cast<size_t>(starts_[r])];
    }
    for (int32_t old : order) {
      const Draft& d = drafts_[static_cast<size_t>(old)];
      Automaton::Node node;
      node.rule = d.rule;
      node.accept = d.accept;
      node.edges_begin = static_cast<int32_t>(a->edges_.size());
      for (const auto& e : d.edges) a->edges_.push_back({e.lo, e.hi, new_id[static_cast<size_t>(e.target)]});
      node.edges_end = static_cast<int32_t>(a->edges_.size());
      node.calls_begin = static_cast<int32_t>(a->calls_.size());
      for (const auto& c : d.calls) a->calls_.push_back({c.rule, new_id[static_cast<size_t>(c.next)]});
      node.calls_end = static_cast<int32_t>(a->calls_.size());
      a->nodes_.push_back(node);
    }
    return a;
  }

  const Grammar& grammar_;
  const AutomatonLimits& limits_;
  absl::Status status_;
  int32_t current_rule_ = 0;
  std::vector<RawState> raw_;
  std::vector<int32_t> entry_, final_;  // per rule: raw entry and exit states
  std::vector<Draft> drafts_;
  std::vector<int32_t> starts_;  // per rule: draft of its entry
};

absl::StatusOr<std::shared_ptr<const Automaton>> Automaton::Build(const Grammar& grammar,
                                                                  const AutomatonLimits& limits) {
  return AutomatonBuilder(grammar, limits).Build();
}

}  // namespace kvtier::grammar

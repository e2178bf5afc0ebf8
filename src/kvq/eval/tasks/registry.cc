#include "kvq/eval/eval_task.h"

namespace kvq::eval {

// One line per task (each defined in its file here).
std::unique_ptr<EvalTask> make_text_task();    // text_task.cc: PPL + KLD / top-1 on --text
std::unique_ptr<EvalTask> make_gsm8k_task();   // gsm8k_task.cc: GSM8K accuracy
std::unique_ptr<EvalTask> make_decode_task();  // decode_task.cc: decode tokens/s

const std::vector<std::unique_ptr<EvalTask>>& eval_tasks() {
  static const std::vector<std::unique_ptr<EvalTask>> tasks = [] {
    std::vector<std::unique_ptr<EvalTask>> t;
    t.push_back(make_text_task());
    t.push_back(make_gsm8k_task());
    t.push_back(make_decode_task());
    return t;
  }();
  return tasks;
}

}  // namespace kvq::eval

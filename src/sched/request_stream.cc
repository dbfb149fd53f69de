// RequestStream: one mutex guards the queue and the finished flags; the callback runs outside it.
#include "sched/request_stream.h"

namespace mla::sched {

RequestStream::RequestStream(RequestId id, EventCallback callback, std::weak_ptr<CancelSink> sink)
    : id_(id), callback_(std::move(callback)), sink_(std::move(sink)) {}

std::optional<RequestEvent> RequestStream::next() {
  std::unique_lock lock(mu_);
  if (callback_) return std::nullopt;
  cv_.wait(lock, [&] { return !queue_.empty() || drained_; });
  if (queue_.empty()) return std::nullopt;
  RequestEvent e = std::move(queue_.front());
  queue_.pop_front();
  if (e.finish != FinishReason::kNone) drained_ = true;
  return e;
}

std::optional<RequestEvent> RequestStream::next_for(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  if (callback_) return std::nullopt;
  if (!cv_.wait_for(lock, timeout, [&] { return !queue_.empty() || drained_; }))
    return std::nullopt;
  if (queue_.empty()) return std::nullopt;
  RequestEvent e = std::move(queue_.front());
  queue_.pop_front();
  if (e.finish != FinishReason::kNone) drained_ = true;
  return e;
}

RequestOutput RequestStream::collect() {
  if (callback_) {
    wait();
    std::lock_guard lock(mu_);
    return summed_;
  }
  RequestOutput out;
  while (std::optional<RequestEvent> e = next()) out.add(*e);
  return out;
}

bool RequestStream::finished() const {
  std::lock_guard lock(mu_);
  return finished_;
}

void RequestStream::wait() const {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return finished_; });
}

void RequestStream::cancel() {
  if (std::shared_ptr<CancelSink> sink = sink_.lock()) sink->request_cancel(id_);
}

void RequestStream::deliver(RequestEvent event) {
  const bool last = event.finish != FinishReason::kNone;
  if (callback_) {
    callback_(event);
    std::lock_guard lock(mu_);
    summed_.add(event);
    finished_ = finished_ || last;
  } else {
    std::lock_guard lock(mu_);
    queue_.push_back(std::move(event));
    finished_ = finished_ || last;
  }
  cv_.notify_all();
}

}  // namespace mla::sched

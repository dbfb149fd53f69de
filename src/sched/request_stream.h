// RequestStream: a frontend's handle on one submitted request: its events, delivered either to a
// callback (on the engine thread) or to a queue the frontend pulls from (blocking or with a
// timeout), and cancel(). Thread-safe; may outlive the engine.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>

#include "sched/request.h"

namespace mla::sched {

// Called on the engine thread for every event of one request, in order. It must return quickly
// (the whole batch waits) and must not call Engine methods other than cancel() /
// RequestStream::cancel(), which never block.
using EventCallback = std::function<void(const RequestEvent&)>;

// What a stream needs from the engine: a way to ask for cancellation. Held weakly, so a stream
// left behind by a stopped engine still works (cancel() then does nothing).
class CancelSink {
 public:
  virtual void request_cancel(RequestId id) = 0;

 protected:
  ~CancelSink() = default;
};

class RequestStream {
 public:
  RequestStream(RequestId id, EventCallback callback, std::weak_ptr<CancelSink> sink);

  RequestId id() const { return id_; }

  // Pull form (no callback). Blocks until an event is available and returns it; std::nullopt
  // once the final event has been returned (and at once for a callback stream).
  std::optional<RequestEvent> next();
  // As next(), but waits at most `timeout`; std::nullopt on a timeout too (see finished()).
  std::optional<RequestEvent> next_for(std::chrono::milliseconds timeout);
  // Pulls every remaining event and sums them (pull form); after the end for a callback stream.
  RequestOutput collect();

  // The final event has been delivered (it may not have been pulled yet).
  bool finished() const;
  // Blocks until finished().
  void wait() const;

  // Asks the engine to stop this request; its blocks are released before the next step and a
  // final event with finish kCancelled follows (unless it finished first). Never blocks on a step.
  void cancel();

  // Engine side: hands one event over (to the callback, else to the queue).
  void deliver(RequestEvent event);

 private:
  const RequestId id_;
  const EventCallback callback_;
  const std::weak_ptr<CancelSink> sink_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::deque<RequestEvent> queue_;
  RequestOutput summed_;  // callback form: what collect() returns
  bool finished_ = false;
  bool drained_ = false;  // the final event was pulled
};

}  // namespace mla::sched

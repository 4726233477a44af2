#include "gloo/collectives.h"

#include <gloo/allreduce.h>
#include <gloo/math.h>

#include <algorithm>
#include <cstring>

#include "base/check.h"
#include "gloo/call_check.h"
#include "gloo/reduce.h"

namespace mw::detail {

namespace {

constexpr size_t kSegmentBytes = 512 << 10;  // pipelining granularity of ring steps

// Gloo's own collectives use slot prefixes 0x01-0x08 in the top byte; ours stay clear of them.
enum SlotClass : uint64_t {
  kP2PData = 0x12,
  kCollData = 0x14,
};

uint32_t hash24(const void* data, size_t n) {
  uint32_t h = 2166136261u;
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 16777619u;
  return (h ^ (h >> 24)) & 0xffffff;
}

uint64_t hash40(const void* data, size_t n) {
  uint64_t h = 14695981039346656037ull;  // FNV-1a, 64 bits, folded to 40
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return (h ^ (h >> 40)) & 0xffffffffffull;
}

uint64_t makeSlot(SlotClass cls, uint32_t hash, uint32_t phase, uint64_t seq) {
  return (static_cast<uint64_t>(cls) << 56) | (static_cast<uint64_t>(hash) << 32) |
         (static_cast<uint64_t>(phase & 0xff) << 24) | (seq & 0xffffff);
}

// What members must agree on, hashed into every slot of the operation.
struct Desc {
  uint8_t kind = 0;
  uint8_t dtype = 0;
  uint8_t reduce = 0;
  uint8_t pad = 0;
  int32_t root = -1;
  uint64_t count = 0;
};
// Hashed as bytes: no padding, whose bytes would differ between members.
static_assert(sizeof(Desc) == 16, "Desc must have no implicit padding");

// What every member must agree on (CallCheck::callOf decides), as hashable bytes.
Desc describe(const OpRequest& op) {
  const CallCheck::Call c = CallCheck::callOf(op, 0);
  Desc d;
  d.kind = static_cast<uint8_t>(c.kind);
  d.dtype = static_cast<uint8_t>(c.dtype);
  d.reduce = static_cast<uint8_t>(c.reduce + 1);  // -1 (none) hashes as 0
  d.root = c.peer;
  d.count = c.count;
  return d;
}

// Element offsets of n chunks over `count` elements.
struct Layout {
  size_t elem = 1;
  std::vector<size_t> off;  // n + 1 entries

  static Layout even(size_t count, int n, size_t elem) {
    Layout l;
    l.elem = elem;
    for (int i = 0; i <= n; ++i) l.off.push_back(count * static_cast<size_t>(i) / n);
    return l;
  }
  size_t byteOff(int c) const { return off[c] * elem; }
  size_t byteLen(int c) const { return (off[c + 1] - off[c]) * elem; }
  size_t maxBytes() const {
    size_t m = 0;
    for (size_t i = 0; i + 1 < off.size(); ++i) m = std::max(m, (off[i + 1] - off[i]) * elem);
    return m;
  }
  int segments() const {
    return static_cast<int>(std::max<size_t>(1, (maxBytes() + kSegmentBytes - 1) / kSegmentBytes));
  }
  // Byte range [first, second) of segment k of K within chunk c, element aligned.
  std::pair<size_t, size_t> seg(int c, int k, int K) const {
    size_t len = off[c + 1] - off[c];
    size_t b = off[c] + len * k / K, e = off[c] + len * (k + 1) / K;
    return {b * elem, e * elem};
  }
};

class Runner {
 public:
  Runner(const OpRequest& op, const CollectiveEnv& env)
      : op_(op), env_(env), n_(env.size), r_(env.rank), desc_(describe(op)) {
    hash_ = hash24(&desc_, sizeof(desc_));
  }

  void run();

 private:
  int mod(long x) const { return static_cast<int>(((x % n_) + n_) % n_); }
  uint64_t slot(uint32_t phase) const { return makeSlot(kCollData, hash_, phase, env_.seq); }
  // A buffer that lives until the operation ends.
  Buf* buf(void* p, size_t n) {
    bufs_.push_back(env_.channel->buffer(p, n));
    return bufs_.back().get();
  }
  // Sends complete when their bytes are on the wire; nothing is written into a region before the
  // message sent from it has arrived at its peer (the ring's data dependencies ensure it), so the
  // waits are left to the end, when they rarely block.
  void send(Buf* b, int peer, uint32_t phase, size_t off, size_t n) {
    b->send(peer, slot(phase), off, n);
    sends_.push_back(b);
  }
  // Waits for the next receive on `b`. Members whose calls disagree post on different slots, so a
  // wait that never ends is what a disagreement looks like here: CallCheck names it.
  void waitRecv(Buf* b) { b->waitRecv(); }

  bool native() const;
  // Out of line, and calls Gloo through glooAllreduce(): ThreadSanitizer names each frame by the
  // function holding its return address, so only then do its reports name this function
  // (.ci/tsan.supp matches it).
  [[gnu::noinline]] void nativeAllReduce();
  void runAlgorithm();
  void ringReduceScatter(char* base, const Layout& l);
  void ringAllGather(char* base, const Layout& l, uint32_t phase);
  void broadcastChain(char* base, size_t bytes);
  void reduceToRoot(char* base, const Layout& l);
  void gather();
  void scatter();
  void reduceScatter();
  void allToAll();
  void barrier();

  const OpRequest& op_;
  CollectiveEnv env_;
  const int n_;
  const int r_;
  Desc desc_;
  // The barrier's one-byte messages: members, not locals, since sends are waited for after the
  // algorithm returns and Gloo's loop may write from them until then.
  char token_ = 1;
  char sink_ = 0;
  uint32_t hash_ = 0;
  std::vector<std::unique_ptr<Buf>> bufs_;
  std::vector<Buf*> sends_;
};

bool Runner::native() const {
  if (op_.kind != OpKind::kAllReduce || env_.context == nullptr) return false;
  switch (op_.in.dtype) {
    case DType::kFloat32:
    case DType::kFloat64:
    case DType::kInt32:
    case DType::kInt64:
      return true;
    default:
      return false;
  }
}

using GlooReduceFn = void (*)(void*, const void*, const void*, size_t);

template <typename T>
GlooReduceFn reduceFunc(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return static_cast<GlooReduceFn>(&gloo::sum<T>);
    case ReduceOp::kProd:
      return static_cast<GlooReduceFn>(&gloo::product<T>);
    case ReduceOp::kMin:
      return static_cast<GlooReduceFn>(&gloo::min<T>);
    case ReduceOp::kMax:
      return static_cast<GlooReduceFn>(&gloo::max<T>);
  }
  return static_cast<GlooReduceFn>(&gloo::sum<T>);
}

template <typename T>
void setData(gloo::AllreduceOptions& o, const OpRequest& op,
             std::unique_ptr<gloo::transport::UnboundBuffer> out) {
  o.setOutput<T>(std::move(out));
  o.setReduceFunction(reduceFunc<T>(op.reduce));
}

[[gnu::noinline]] void glooAllreduce(gloo::AllreduceOptions& o) { gloo::allreduce(o); }

void Runner::nativeAllReduce() {
  if (env_.channel->aborted()) throw AbortedError{};
  gloo::AllreduceOptions& o = env_.native->get(op_, env_.context, *env_.channel);
  // The tag carries the call's hash: members whose calls differ never match each other's messages
  // (a message larger than the buffer Gloo posted for it would abort the process).
  o.setTag((hash_ << 8) | static_cast<uint32_t>(env_.seq & 0xff));
  o.setTimeout(std::max(std::chrono::milliseconds(1), remaining(env_.channel->deadline())));
  try {
    glooAllreduce(o);
  } catch (const std::exception&) {
    // After a failure the options' buffer may still have a transfer outstanding: never reuse it.
    env_.native->clear();
    if (env_.channel->aborted()) throw AbortedError{};
    throw;
  }
  // Gloo's ring ignores what its waits return, and an aborted wait returns false: an abort during
  // the ring's last waits lets gloo::allreduce return normally with the output half written and a
  // transfer into it still running (ThreadSanitizer saw Gloo's reader write the caller's buffer
  // after the call had reported success). Whatever an aborted world's operation did, it failed.
  if (env_.channel->aborted()) {
    env_.native->clear();
    throw AbortedError{};
  }
}

void Runner::ringReduceScatter(char* base, const Layout& l) {
  const int K = l.segments();
  const size_t maxc = l.maxBytes();
  const int right = mod(r_ + 1), left = mod(r_ - 1);
  auto& scratch = *env_.scratch;
  if (scratch.size() < maxc * (n_ - 1)) scratch.resize(maxc * (n_ - 1));
  auto data = buf(base, l.byteOff(n_));
  auto sbuf = buf(scratch.data(), maxc * (n_ - 1));
  // Step s receives chunk r-s-2 from the left and sends chunk r-s-1 (reduced at step s-1).
  for (int s = 0; s < n_ - 1; ++s) {
    int c = mod(r_ - s - 2);
    for (int k = 0; k < K; ++k) {
      auto [b, e] = l.seg(c, k, K);
      if (e > b) sbuf->recv(left, slot(0), s * maxc + (b - l.byteOff(c)), e - b);
    }
  }
  for (int k = 0; k < K; ++k) {
    auto [b, e] = l.seg(mod(r_ - 1), k, K);
    if (e > b) send(data, right, 0, b, e - b);
  }
  for (int s = 0; s < n_ - 1; ++s) {
    int c = mod(r_ - s - 2);
    for (int k = 0; k < K; ++k) {
      auto [b, e] = l.seg(c, k, K);
      if (e == b) continue;
      waitRecv(sbuf);
      reduceInto(base + b, scratch.data() + s * maxc + (b - l.byteOff(c)), (e - b) / l.elem,
                 op_.in.dtype, op_.reduce);
      if (s < n_ - 2) send(data, right, 0, b, e - b);
    }
  }
}

// Every rank starts with chunk r complete; step s sends chunk r-s and receives chunk r-s-1.
void Runner::ringAllGather(char* base, const Layout& l, uint32_t phase) {
  const int K = l.segments();
  const int right = mod(r_ + 1), left = mod(r_ - 1);
  auto data = buf(base, l.byteOff(n_));
  for (int s = 0; s < n_ - 1; ++s) {
    for (int k = 0; k < K; ++k) {
      auto [b, e] = l.seg(mod(r_ - s - 1), k, K);
      if (e > b) data->recv(left, slot(phase), b, e - b);
    }
  }
  for (int k = 0; k < K; ++k) {
    auto [b, e] = l.seg(r_, k, K);
    if (e > b) send(data, right, phase, b, e - b);
  }
  for (int s = 0; s < n_ - 1; ++s) {
    for (int k = 0; k < K; ++k) {
      auto [b, e] = l.seg(mod(r_ - s - 1), k, K);
      if (e == b) continue;
      waitRecv(data);
      if (s < n_ - 2) send(data, right, phase, b, e - b);
    }
  }
}

void Runner::broadcastChain(char* base, size_t bytes) {
  const int vr = mod(r_ - op_.peer);
  const Layout l = Layout::even(bytes, 1, 1);
  const int K = l.segments();
  auto data = buf(base, bytes);
  const bool has_next = vr < n_ - 1;
  if (vr == 0) {
    for (int k = 0; k < K; ++k) {
      auto [b, e] = l.seg(0, k, K);
      if (e > b) send(data, mod(r_ + 1), 0, b, e - b);
    }
  } else {
    for (int k = 0; k < K; ++k) {
      auto [b, e] = l.seg(0, k, K);
      if (e > b) data->recv(mod(r_ - 1), slot(0), b, e - b);
    }
    for (int k = 0; k < K; ++k) {
      auto [b, e] = l.seg(0, k, K);
      if (e == b) continue;
      waitRecv(data);
      if (has_next) send(data, mod(r_ + 1), 0, b, e - b);
    }
  }
}

void Runner::reduceToRoot(char* base, const Layout& l) {
  ringReduceScatter(base, l);
  auto data = buf(base, l.byteOff(n_));
  int waits = 0;
  if (r_ == op_.peer) {
    for (int c = 0; c < n_; ++c) {
      if (c != r_ && l.byteLen(c) > 0) data->recv(c, slot(1), l.byteOff(c), l.byteLen(c)), ++waits;
    }
    for (int i = 0; i < waits; ++i) waitRecv(data);
  } else if (l.byteLen(r_) > 0) {
    send(data, op_.peer, 1, l.byteOff(r_), l.byteLen(r_));
  }
}

void Runner::gather() {
  const size_t block = op_.in.bytes();
  auto in = buf(op_.in.data, block);
  if (r_ != op_.peer) {
    send(in, op_.peer, 0, 0, block);
    return;
  }
  char* out = static_cast<char*>(op_.out.data);
  auto ob = buf(out, block * n_);
  for (int i = 0; i < n_; ++i) {
    if (i != r_) ob->recv(i, slot(0), i * block, block);
  }
  if (block > 0) std::memcpy(out + r_ * block, op_.in.data, block);
  for (int i = 0; i < n_ - 1; ++i) waitRecv(ob);
}

void Runner::scatter() {
  const size_t block = op_.out.bytes();
  auto ob = buf(op_.out.data, block);
  if (r_ != op_.peer) {
    ob->recv(op_.peer, slot(0), 0, block);
    waitRecv(ob);
    return;
  }
  const char* in = static_cast<const char*>(op_.in.data);
  auto ib = buf(const_cast<char*>(in), block * n_);
  for (int i = 0; i < n_; ++i) {
    if (i != r_) send(ib, i, 0, i * block, block);
  }
  if (block > 0) std::memcpy(op_.out.data, in + r_ * block, block);
}

void Runner::reduceScatter() {
  const size_t block = op_.out.bytes();
  auto& work = *env_.work;
  if (work.size() < block * n_) work.resize(block * n_);
  if (block > 0) std::memcpy(work.data(), op_.in.data, block * n_);
  ringReduceScatter(work.data(), Layout::even(op_.out.count * n_, n_, dtypeSize(op_.out.dtype)));
  if (block > 0) std::memcpy(op_.out.data, work.data() + r_ * block, block);
}

void Runner::allToAll() {
  const size_t block = op_.in.bytes() / n_;
  auto ib = buf(op_.in.data, block * n_);
  auto ob = buf(op_.out.data, block * n_);
  for (int j = 0; j < n_; ++j) {
    if (j != r_) ob->recv(j, slot(0), j * block, block);
  }
  for (int j = 0; j < n_; ++j) {
    if (j != r_) send(ib, j, 0, j * block, block);
  }
  if (block > 0) {
    std::memcpy(static_cast<char*>(op_.out.data) + r_ * block,
                static_cast<const char*>(op_.in.data) + r_ * block, block);
  }
  for (int j = 0; j < n_ - 1; ++j) waitRecv(ob);
}

// Dissemination barrier: in round k send to r+2^k and receive from r-2^k.
void Runner::barrier() {
  auto out = buf(&token_, 1);
  auto in = buf(&sink_, 1);
  uint32_t round = 0;
  for (int dist = 1; dist < n_; dist *= 2, ++round) {
    send(out, mod(r_ + dist), round, 0, 1);
    in->recv(mod(r_ - dist), slot(round), 0, 1);
    waitRecv(in);
  }
}

void Runner::run() {
  if (n_ == 1) {
    // Single member: only the copies remain.
    if (op_.kind == OpKind::kAllGather || op_.kind == OpKind::kGather ||
        op_.kind == OpKind::kScatter || op_.kind == OpKind::kReduceScatter ||
        op_.kind == OpKind::kAllToAll) {
      const Tensor& src = op_.in;
      if (src.bytes() > 0 && src.data != op_.out.data)
        std::memcpy(op_.out.data, src.data, src.bytes());
    }
    return;
  }
  if (native()) return nativeAllReduce();
  runAlgorithm();
  for (Buf* b : sends_) b->waitSend();
}

void Runner::runAlgorithm() {
  char* base = static_cast<char*>(op_.in.data);
  const size_t elem = dtypeSize(op_.in.dtype);
  switch (op_.kind) {
    case OpKind::kBroadcast:
      return broadcastChain(base, op_.in.bytes());
    case OpKind::kAllReduce: {
      Layout l = Layout::even(op_.in.count, n_, elem);
      ringReduceScatter(base, l);
      return ringAllGather(base, l, 1);
    }
    case OpKind::kReduce:
      return reduceToRoot(base, Layout::even(op_.in.count, n_, elem));
    case OpKind::kAllGather: {
      char* out = static_cast<char*>(op_.out.data);
      if (op_.in.bytes() > 0) std::memcpy(out + r_ * op_.in.bytes(), op_.in.data, op_.in.bytes());
      return ringAllGather(out, Layout::even(op_.in.count * n_, n_, elem), 0);
    }
    case OpKind::kGather:
      return gather();
    case OpKind::kScatter:
      return scatter();
    case OpKind::kReduceScatter:
      return reduceScatter();
    case OpKind::kAllToAll:
      return allToAll();
    case OpKind::kBarrier:
      return barrier();
    case OpKind::kSend:
    case OpKind::kRecv:
      break;
  }
}

}  // namespace

struct Collective::Impl {
  Runner runner;
};

Collective::Collective(const OpRequest& op, const CollectiveEnv& env)
    : impl_(std::make_unique<Impl>(Impl{Runner(op, env)})) {}
struct NativeOptionsCache::Entry {
  ~Entry() {
    // As in Buf::~Buf (gloo/channel.cc): taking the buffer's mutex orders Gloo's last touch of it
    // (a completion or signalException, under that mutex) before its free, visibly to TSan.
    if (out != nullptr) out->abortWaitRecv();
    if (channel != nullptr) channel->release(out);  // before the options drop the buffer
  }
  void* data = nullptr;
  size_t count = 0;
  DType dtype = DType::kFloat32;
  ReduceOp reduce = ReduceOp::kSum;
  Channel* channel = nullptr;
  gloo::transport::UnboundBuffer* out = nullptr;  // owned by options, adopted by channel
  std::unique_ptr<gloo::AllreduceOptions> options;
};

NativeOptionsCache::NativeOptionsCache() = default;
NativeOptionsCache::~NativeOptionsCache() = default;
void NativeOptionsCache::clear() { entries_.clear(); }

gloo::AllreduceOptions& NativeOptionsCache::get(const OpRequest& op,
                                                const std::shared_ptr<gloo::Context>& context,
                                                Channel& channel) {
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    const Entry& e = **it;
    if (e.data == op.in.data && e.count == op.in.count && e.dtype == op.in.dtype &&
        e.reduce == op.reduce) {
      std::rotate(it, it + 1, entries_.end());  // most recently used last
      return *entries_.back()->options;
    }
  }
  auto e = std::make_unique<Entry>();
  e->data = op.in.data;
  e->count = op.in.count;
  e->dtype = op.in.dtype;
  e->reduce = op.reduce;
  e->options = std::make_unique<gloo::AllreduceOptions>(context);
  gloo::AllreduceOptions& o = *e->options;
  o.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
  // The output buffer is made here and adopted by the channel, so that an abort interrupts a wait
  // on it: Gloo does not fail an unbound send still in a pair's write queue when the pair fails,
  // and such a send kept a resumed member inside all_reduce until its deadline.
  auto out = context->createUnboundBuffer(op.in.data, op.in.bytes());
  channel.adopt(out.get());
  e->channel = &channel;
  e->out = out.get();
  switch (op.in.dtype) {
    case DType::kFloat32:
      setData<float>(o, op, std::move(out));
      break;
    case DType::kFloat64:
      setData<double>(o, op, std::move(out));
      break;
    case DType::kInt32:
      setData<int32_t>(o, op, std::move(out));
      break;
    default:
      MW_CHECK(op.in.dtype == DType::kInt64);  // native() admits these four types only
      setData<int64_t>(o, op, std::move(out));
      break;
  }
  if (entries_.size() >= kKeep) entries_.erase(entries_.begin());
  entries_.push_back(std::move(e));
  return *entries_.back()->options;
}

Collective::~Collective() = default;
void Collective::run() { impl_->runner.run(); }

uint64_t p2pSlot(int tag, DType dtype, size_t count, uint64_t n) {
  unsigned char key[13];
  key[0] = static_cast<uint8_t>(dtype);
  std::memcpy(key + 1, &count, sizeof(count));
  std::memcpy(key + 9, &tag, sizeof(tag));
  return (static_cast<uint64_t>(kP2PData) << 56) | ((n & 0xffff) << 40) | hash40(key, sizeof(key));
}

}  // namespace mw::detail

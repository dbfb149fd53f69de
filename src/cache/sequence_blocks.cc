// SequenceBlocks: block-table bookkeeping, all-or-nothing append with copy-on-write, truncate,
// fork and release.
#include "cache/sequence_blocks.h"

#include <utility>

#include "core/check.h"

namespace mla {

SequenceBlocks::SequenceBlocks(BlockPool* pool, KvCacheStorage* storage)
    : pool_(pool), storage_(storage) {
  MLA_CHECK(pool != nullptr, "SequenceBlocks without a pool");
  MLA_CHECK(!storage || (storage->page_size() == pool->page_size() &&
                         storage->num_blocks() >= pool->num_blocks()),
            "storage ({} blocks of {}) does not match the pool ({} blocks of {})",
            storage ? storage->num_blocks() : 0, storage ? storage->page_size() : 0,
            pool->num_blocks(), pool->page_size());
}

SequenceBlocks::SequenceBlocks(SequenceBlocks&& o) noexcept
    : pool_(o.pool_),
      storage_(o.storage_),
      blocks_(std::move(o.blocks_)),
      tokens_(std::move(o.tokens_)),
      links_(std::move(o.links_)) {
  o.blocks_.clear();
  o.tokens_.clear();
  o.links_.clear();
}

SequenceBlocks& SequenceBlocks::operator=(SequenceBlocks&& o) noexcept {
  if (this != &o) {
    release();
    pool_ = o.pool_;
    storage_ = o.storage_;
    blocks_ = std::exchange(o.blocks_, {});
    tokens_ = std::exchange(o.tokens_, {});
    links_ = std::exchange(o.links_, {});
  }
  return *this;
}

TokenSlot SequenceBlocks::slot_of(int64_t pos) const {
  MLA_DCHECK(pos >= 0 && pos < num_tokens(), "position {} of {} tokens", pos, num_tokens());
  const int p = page_size();
  return {blocks_[static_cast<size_t>(pos / p)], static_cast<int>(pos % p)};
}

int SequenceBlocks::fill_of_block(size_t i) const {
  const int64_t p = page_size();
  const int64_t rest = num_tokens() - static_cast<int64_t>(i) * p;
  return static_cast<int>(rest < p ? rest : p);
}

PoolOutcome SequenceBlocks::append(std::span<const int32_t> token_ids) {
  if (token_ids.empty()) return PoolOutcome::kOk;
  const int64_t p = page_size();
  const int64_t old_len = num_tokens(), new_len = old_len + static_cast<int64_t>(token_ids.size());
  const int old_fill = static_cast<int>(old_len % p);  // rows in a partial last block, else 0
  const bool cow = old_fill != 0 && !pool_->is_writable(blocks_.back());
  const int64_t new_blocks = (new_len + p - 1) / p - static_cast<int64_t>(blocks_.size());
  const int64_t need = new_blocks + (cow ? 1 : 0);
  if (need > pool_->num_allocatable()) return PoolOutcome::kOutOfPages;

  std::vector<BlockId> fresh;
  fresh.reserve(static_cast<size_t>(need));
  MLA_CHECK(pool_->allocate(static_cast<int32_t>(need), &fresh) == PoolOutcome::kOk,
            "allocate({}) failed with {} allocatable", need, pool_->num_allocatable());
  size_t next = 0;
  if (cow) {
    const BlockId old = blocks_.back(), copy = fresh[next++];
    if (storage_) storage_->copy_slots(copy, old, old_fill);
    pool_->set_fill(copy, old_fill);
    pool_->decref(old);
    blocks_.back() = copy;
  }
  for (; next < fresh.size(); ++next) blocks_.push_back(fresh[next]);
  tokens_.insert(tokens_.end(), token_ids.begin(), token_ids.end());
  // Every block that received rows is now exclusively ours: record how full it is.
  for (size_t i = static_cast<size_t>(old_len / p); i < blocks_.size(); ++i)
    pool_->set_fill(blocks_[i], fill_of_block(i));
  return PoolOutcome::kOk;
}

void SequenceBlocks::truncate(int64_t new_num_tokens) {
  MLA_CHECK(new_num_tokens >= 0 && new_num_tokens <= num_tokens(), "truncate {} tokens to {}",
            num_tokens(), new_num_tokens);
  const int64_t p = page_size();
  const size_t keep_blocks = static_cast<size_t>((new_num_tokens + p - 1) / p);
  while (blocks_.size() > keep_blocks) {
    pool_->decref(blocks_.back());
    blocks_.pop_back();
  }
  tokens_.resize(static_cast<size_t>(new_num_tokens));
  const size_t full_blocks = static_cast<size_t>(new_num_tokens / p);
  if (links_.size() > full_blocks) links_.resize(full_blocks);
  if (!blocks_.empty() && pool_->is_writable(blocks_.back()))
    pool_->set_fill(blocks_.back(), fill_of_block(blocks_.size() - 1));
}

SequenceBlocks SequenceBlocks::fork() {
  SequenceBlocks child(pool_, storage_);
  for (BlockId b : blocks_) pool_->incref(b);
  child.blocks_ = blocks_;
  child.tokens_ = tokens_;
  child.links_ = links_;
  return child;
}

void SequenceBlocks::release() {
  for (auto it = blocks_.rbegin(); it != blocks_.rend(); ++it) pool_->decref(*it);
  blocks_.clear();
  tokens_.clear();
  links_.clear();
}

void SequenceBlocks::adopt_full_blocks(std::span<const BlockId> blocks,
                                       std::span<const int32_t> token_ids,
                                       std::span<const ChainLink> links) {
  MLA_CHECK(blocks_.empty() && token_ids.size() == blocks.size() * page_size() &&
                links.size() == blocks.size(),
            "adopt {} blocks / {} tokens / {} links into a sequence of {} tokens", blocks.size(),
            token_ids.size(), links.size(), num_tokens());
  blocks_.assign(blocks.begin(), blocks.end());
  tokens_.assign(token_ids.begin(), token_ids.end());
  links_.assign(links.begin(), links.end());
}

}  // namespace mla

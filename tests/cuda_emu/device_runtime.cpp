// The CUDA emulator's device runtime (tests/cuda_emu/README.md): the blocks, fibers, barriers,
// warp exchanges and asynchronous copies that device.h declares, built once into
// libcuda_emu_device.so, which every module links. They were inline in device.h and so
// compiled into every module: a one-line kernel took 0.61 s to build at clang -O0, nearly all
// of it the scheduler and its containers (601 functions), the same as a quantized module's
// 0.61-0.72 s.
#include "device.h"

#include <sys/mman.h>
#if !defined(__x86_64__) || defined(OPTJIT_EMU_UCONTEXT)
#include <ucontext.h>
#endif
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <vector>

namespace optjit_emu {
namespace {

struct Barrier {
  unsigned int arrived = 0;
  unsigned long long generation = 0;
  std::vector<unsigned int> waiting;  // fibers
};

// Where a fiber (or the scheduler) stopped. On x86-64 a switch saves the callee-saved registers
// and the FP control words on its own stack and swaps stack pointers (optjit_emu_switch below):
// swapcontext also saves and restores the signal mask, a system call each way, which was about
// 30% of an emulated test's running time (perf, CudaQuantizedLaunch mode 17 with its modules
// built). Elsewhere, or with -DOPTJIT_EMU_UCONTEXT, ucontext.
#if defined(__x86_64__) && !defined(OPTJIT_EMU_UCONTEXT)
struct Context {
  void* sp = nullptr;  // the saved registers lie from here up
};
#else
struct Context {
  ucontext_t uc;
};
#endif

// An asynchronous copy (cp.async) not yet made.
struct AsyncCopy {
  void* to;
  const void* from;
  size_t bytes;
};

struct Fiber {
  Context context;
  Dim tid;
  unsigned int lane = 0, warp = 0;
  bool exited = false;
  // The thread's asynchronous copies: its committed groups, oldest first, and the open one
  // (vectors: empty ones allocate nothing, and a block's fibers are made afresh each block).
  std::vector<std::vector<AsyncCopy>> copy_groups;
  std::vector<AsyncCopy> open_copies;
  enum class Wait { none, block, warp } waits = Wait::none;  // for a deadlock's message
};

// A fiber's stack, with an unreadable page below it: an overflow faults instead of writing over
// whatever lies next to it.
struct Stack {
  static constexpr size_t kBytes = 256 * 1024;
  void* map = nullptr;
  size_t page = 0;
  Stack() = default;
  Stack(const Stack&) = delete;
  Stack& operator=(const Stack&) = delete;
  Stack(Stack&& o) noexcept : map(o.map), page(o.page) { o.map = nullptr; }
  ~Stack() {
    if (map) munmap(map, kBytes + page);
  }
  // The usable part (null if it cannot be mapped).
  void* base() {
    if (!map) {
      page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
      void* m =
          mmap(nullptr, kBytes + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (m == MAP_FAILED) return nullptr;
      mprotect(m, page, PROT_NONE);
      map = m;
    }
    return static_cast<char*>(map) + page;
  }
};

struct Block {
  Dim bid, bdim, gdim;
  std::vector<Fiber> fibers;
  std::vector<Stack> stacks;
  std::deque<unsigned int> runnable;  // fibers ready to run, in turn
  unsigned int live = 0;
  std::vector<unsigned int> warp_live;
  Barrier block_barrier;
  std::vector<Barrier> warp_barriers;
  std::vector<unsigned long long> slots;  // [warp][parity][lane]: the value a lane gave
  std::vector<unsigned long long> given;  // [warp][parity][lane]: the generation it gave it at
  Context scheduler;
  unsigned int current = 0;
  char error[512] = {};
  void (*body)(void*) = nullptr;
  void* args = nullptr;
};

// One launch at a time in the process (the driver holds a lock around every launch), so the
// block running is one for every module.
Block* block = nullptr;

Fiber& self() { return block->fibers[block->current]; }

void fiber_main();

#if defined(__x86_64__) && !defined(OPTJIT_EMU_UCONTEXT)
}  // namespace
}  // namespace optjit_emu
// optjit_emu_switch(from, to): pushes rbp, rbx, r12-r15 and MXCSR and the x87 control word,
// stores the stack pointer in *from, takes `to` as the stack pointer and pops the same from
// it, then returns to where that stack's owner switched away (or, for a new fiber, to the
// entry that make_context put there). Hidden: the runtime's own.
asm(R"(
  .text
  .p2align 4
  .globl optjit_emu_switch
  .hidden optjit_emu_switch
  .type optjit_emu_switch, @function
optjit_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size optjit_emu_switch, .-optjit_emu_switch
)");
extern "C" __attribute__((visibility("hidden"))) void optjit_emu_switch(void** from, void* to);
namespace optjit_emu {
namespace {

void switch_context(Context& from, Context& to) { optjit_emu_switch(&from.sp, to.sp); }

// A new fiber starts in fiber_entry, which optjit_emu_switch "returns" to. Its first switch
// pops seven words (the control words, then six registers, all but the control words zero)
// and the entry's address; the word above is a return address of 0 that no one uses, so that
// the entry finds the stack as a call leaves it (16-byte aligned below the return address).
void fiber_entry() {
  fiber_main();
  __builtin_unreachable();
}
void make_context(Context& c, void* stack, size_t bytes) {
  auto* top = reinterpret_cast<uint64_t*>((reinterpret_cast<uintptr_t>(stack) + bytes) &
                                          ~static_cast<uintptr_t>(15));
  uint64_t* sp = top - 9;
  uint32_t words[2] = {0, 0};
  asm volatile("stmxcsr %0\n\tfnstcw %1" : "=m"(words[0]), "=m"(words[1]));
  std::memcpy(&sp[0], words, 8);
  for (int r = 1; r <= 6; ++r) sp[r] = 0;  // r15, r14, r13, r12, rbx, rbp
  sp[7] = reinterpret_cast<uint64_t>(&fiber_entry);
  sp[8] = 0;  // fiber_entry's return address: it never returns
  c.sp = sp;
}
#else
void switch_context(Context& from, Context& to) { swapcontext(&from.uc, &to.uc); }
void fiber_entry() { fiber_main(); }
void make_context(Context& c, void* stack, size_t bytes) {
  getcontext(&c.uc);
  c.uc.uc_stack.ss_sp = stack;
  c.uc.uc_stack.ss_size = bytes;
  c.uc.uc_link = nullptr;  // fiber_main switches away for good before it could return
  makecontext(&c.uc, fiber_entry, 0);
}
#endif

void fail(const char* message) {
  if (!block->error[0]) std::snprintf(block->error, sizeof(block->error), "%s", message);
}

// Leaves the CPU to the next runnable fiber; the caller has put itself on a wait list (or
// exited).
void suspend() { switch_context(self().context, block->scheduler); }

void release(Barrier& b) {
  b.arrived = 0;
  ++b.generation;
  for (unsigned int f : b.waiting) {
    block->fibers[f].waits = Fiber::Wait::none;
    block->runnable.push_back(f);
  }
  b.waiting.clear();
}

// Arrive at b with `participants` fibers taking part; returns when all of them have.
void arrive(Barrier& b, unsigned int participants, Fiber::Wait where) {
  if (++b.arrived >= participants) {
    release(b);
    return;
  }
  b.waiting.push_back(block->current);
  self().waits = where;
  suspend();
}

void exit_fiber() {
  Fiber& f = self();
  f.exited = true;
  --block->live;
  --block->warp_live[f.warp];
  // Those waiting may now be all that is left.
  if (block->block_barrier.arrived > 0 && block->block_barrier.arrived >= block->live)
    release(block->block_barrier);
  Barrier& w = block->warp_barriers[f.warp];
  if (w.arrived > 0 && w.arrived >= block->warp_live[f.warp]) release(w);
}

void fiber_main() {
  block->body(block->args);
  exit_fiber();
  // Back to the scheduler for good: nothing switches to an exited fiber.
  suspend();
}

size_t slot(unsigned int warp, unsigned long long generation, unsigned int lane) {
  return (static_cast<size_t>(warp) * 2 + (generation & 1)) * 32 + lane;
}

}  // namespace

unsigned long long shfl_xor_bits(unsigned int mask, unsigned long long bits, int lane_mask) {
  Fiber& f = self();
  if (mask != 0xffffffffu)
    fail("__shfl_xor_sync with a partial mask (the emulator takes full warps only)");
  Barrier& b = block->warp_barriers[f.warp];
  const unsigned long long generation = b.generation;
  block->slots[slot(f.warp, generation, f.lane)] = bits;
  block->given[slot(f.warp, generation, f.lane)] = generation + 1;
  arrive(b, block->warp_live[f.warp], Fiber::Wait::warp);
  // The lane read from must have taken part in this exchange (it may have exited since).
  const size_t from = slot(f.warp, generation, f.lane ^ static_cast<unsigned int>(lane_mask & 31));
  if (block->given[from] != generation + 1)
    fail("__shfl_xor_sync read a lane that did not take part (it has exited or does not exist)");
  return block->slots[from];
}

void syncthreads() { arrive(block->block_barrier, block->live, Fiber::Wait::block); }

// __syncwarp: waits for every lane of the warp that has not exited (the barrier the exchanges
// use; every lane reaches the same sequence of them).
void syncwarp(unsigned int mask) {
  if (mask != 0xffffffffu)
    fail("__syncwarp with a partial mask (the emulator takes full warps only)");
  arrive(block->warp_barriers[self().warp], block->warp_live[self().warp], Fiber::Wait::warp);
}

// cp.async as late as CUDA lets it land: a copy is made when the thread waits for its group
// (cp.async.wait_group), and its destination is filled with 0xff bytes (NaN for floats) when
// it is issued. So a read of a copy before the wait for it, by this thread or by another lane
// before a __syncwarp after that wait, and a copy issued over bytes a lane has yet to read,
// both read the filling instead of the data, and the step's bits differ. Addresses must be
// aligned to the copy's size, as cp.async requires.
void cp_async(void* to, const void* from, size_t bytes) {
  if (reinterpret_cast<uintptr_t>(to) % bytes != 0 ||
      reinterpret_cast<uintptr_t>(from) % bytes != 0)
    fail("cp.async with an address not aligned to its size");
  std::memset(to, 0xff, bytes);
  self().open_copies.push_back({to, from, bytes});
}
void cp_commit() {
  Fiber& f = self();
  f.copy_groups.push_back(std::move(f.open_copies));
  f.open_copies.clear();
}
void cp_wait(int newest) {
  Fiber& f = self();
  if (f.copy_groups.size() <= static_cast<size_t>(newest)) return;
  const auto done = f.copy_groups.end() - newest;
  for (auto g = f.copy_groups.begin(); g != done; ++g)
    for (const AsyncCopy& c : *g) std::memcpy(c.to, c.from, c.bytes);
  f.copy_groups.erase(f.copy_groups.begin(), done);
}

const Dim& thread_idx() { return self().tid; }
const Dim& block_idx() { return block->bid; }
const Dim& block_dim() { return block->bdim; }
const Dim& grid_dim() { return block->gdim; }

namespace {

// Runs one block of `threads` fibers over body(args); false (with b.error) on a deadlock or an
// error a fiber raised.
bool run_block(Block& b) {
  const unsigned int n = b.bdim.x * b.bdim.y * b.bdim.z;
  const unsigned int warps = (n + 31) / 32;
  b.fibers.assign(n, Fiber{});
  if (b.stacks.size() < n) b.stacks.resize(n);
  b.warp_live.assign(warps, 0);
  b.warp_barriers.assign(warps, Barrier{});
  b.block_barrier = Barrier{};
  b.slots.assign(static_cast<size_t>(warps) * 64, 0);
  b.given.assign(static_cast<size_t>(warps) * 64, 0);
  b.runnable.clear();
  b.live = n;
  for (unsigned int t = 0; t < n; ++t) {
    Fiber& f = b.fibers[t];
    f.tid = {t % b.bdim.x, (t / b.bdim.x) % b.bdim.y, t / (b.bdim.x * b.bdim.y)};
    f.lane = t % 32;
    f.warp = t / 32;
    ++b.warp_live[f.warp];
    void* stack = b.stacks[t].base();
    if (!stack) {
      fail("no memory for a thread's stack");
      return false;
    }
    make_context(f.context, stack, Stack::kBytes);
    b.runnable.push_back(t);
  }
  while (!b.runnable.empty() && !b.error[0]) {
    b.current = b.runnable.front();
    b.runnable.pop_front();
    switch_context(b.scheduler, b.fibers[b.current].context);
  }
  if (b.error[0]) return false;
  if (b.live > 0) {
    unsigned int at_block = 0, at_warp = 0;
    for (const Fiber& f : b.fibers)
      if (!f.exited)
        (f.waits == Fiber::Wait::block ? at_block : at_warp) += f.waits != Fiber::Wait::none;
    std::snprintf(b.error, sizeof(b.error),
                  "deadlock in block (%u, %u, %u): %u threads wait at __syncthreads and %u at "
                  "__shfl_xor_sync, and none can go on",
                  b.bid.x, b.bid.y, b.bid.z, at_block, at_warp);
    return false;
  }
  return true;
}

Block the_block;  // its stacks are kept from launch to launch

}  // namespace

const char* run_grid(void (*body)(void*), void* args, Dim grid, Dim threads) {
  Block& b = the_block;
  block = &b;
  b.error[0] = 0;
  b.body = body;
  b.args = args;
  b.gdim = grid;
  b.bdim = threads;
  for (unsigned int z = 0; z < grid.z; ++z)
    for (unsigned int y = 0; y < grid.y; ++y)
      for (unsigned int x = 0; x < grid.x; ++x) {
        b.bid = {x, y, z};
        if (!run_block(b)) return b.error;
      }
  return nullptr;
}

}  // namespace optjit_emu

/* How fast AMX tile loads stream weights from DRAM: 32 rows of A held in tiles, B read once over
 * 384 MB in the prepacked layout (per k tile 16 rows of 256 bytes = 4 units, both unit pairs
 * used), 1 GB read between runs to evict it; plain tile loads, with prefetcht0 / prefetcht2 a
 * distance ahead, and with each k tile first copied by AVX-512 loads into an L1 buffer. One
 * thread. The numbers behind docs/performance.md's AMX section of 2026-12-02; not part of the
 * build (x86-64 with AMX only):
 *   cc -O2 -mamx-tile -mamx-int8 -mavx512f bench/amx_b_stream.c -o amx_b_stream */
#define _GNU_SOURCE
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+1e-9*t.tv_nsec;}
static const unsigned char cf[64] __attribute__((aligned(64))) = {1,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,
   64,0,64,0,64,0,64,0,64,0,64,0,64,0,64,0, 0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0, 16,16,16,16,16,16,16,16};
static int8_t A[2*1024*2] __attribute__((aligned(64)));
static uint8_t stage[4096*8] __attribute__((aligned(64)));
/* mode 0 plain, 1 prefetcht0 pf bytes ahead, 2 prefetcht2, 3 copy each k tile with AVX-512 into L1 then tile load */
static void run(const uint8_t *B, size_t kts, int mode, size_t pf, int32_t *c){
  _tile_zero(0);_tile_zero(1);_tile_zero(2);_tile_zero(3);
  _tile_loadd(4,A,64); _tile_loadd(5,A+1024,64);
  for(size_t t=0;t<kts;t++){
    const uint8_t*b=B+4096*t;
    if(mode==1||mode==2){ const char*p=(const char*)b+pf; for(int l=0;l<64;l++){ if(mode==1)_mm_prefetch(p+64*l,_MM_HINT_T0); else _mm_prefetch(p+64*l,_MM_HINT_T2);} }
    if(mode==3){ uint8_t*s=stage+(t&7)*4096; for(int l=0;l<64;l++) _mm512_store_si512((void*)(s+64*l),_mm512_load_si512((const void*)(b+64*l))); b=s; }
    for(int pair=0;pair<2;pair++){
      _tile_loadd(6,b+128*pair,256);
      _tile_dpbsud(0,4,6);
      _tile_dpbsud(2,5,6);
      _tile_loadd(7,b+128*pair+64,256);
      _tile_dpbsud(1,4,7);
      _tile_dpbsud(3,5,7);
    }
  }
  _tile_stored(0,c,64);
}
int main(void){
  syscall(SYS_arch_prctl,0x1023,18); _tile_loadconfig(cf);
  size_t bytes=(size_t)384<<20, kts=bytes/4096;
  uint8_t*B=aligned_alloc(2<<20,bytes+(1<<20)); memset(B,1,bytes+(1<<20)); memset(A,1,sizeof A);
  uint8_t*F=aligned_alloc(4096,(size_t)1<<30); memset(F,2,(size_t)1<<30); /* evict: read 1 GB between runs */
  int32_t c[256] __attribute__((aligned(64)));
  struct {int mode; size_t pf;} cs[]={{0,0},{1,1024},{1,4096},{1,8192},{1,16384},{2,4096},{2,16384},{2,65536},{3,0}};
  for(int rep=0;rep<2;rep++) for(unsigned i=0;i<sizeof cs/sizeof cs[0];i++){
    volatile uint64_t sink=0; for(size_t j=0;j<((size_t)1<<30);j+=64) sink+=F[j];
    double t0=now(); run(B,kts,cs[i].mode,cs[i].pf,c); double t=now()-t0;
    printf("mode %d pf %6zu: B %.1f GB/s, %.0f GOPS\n",cs[i].mode,cs[i].pf,bytes/t/1e9, (double)kts*8*16*16*64*2/t/1e9);
  }
  return 0;
}

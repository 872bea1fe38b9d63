/* AMX tile loads streaming a 24 MB buffer (L3-resident after warm-up): 16 rows of 64 bytes at
 * stride 256 (the prepacked panel: 4 units a step, a unit pair read per pass) vs stride 64
 * (a contiguous 1 KB tile), same bytes in total, with a TDPBSUD per tile as the kernel does.
 * The measurement behind docs/performance.md's note on the prepacked mid case; not part of the
 * build (x86-64 with AMX only):
 *   cc -O2 -mamx-tile -mamx-int8 -mavx512f bench/amx_tile_stream.c -o amx_tile_stream */
#define _GNU_SOURCE
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
/* palette 1, 8 tiles of 16 rows x 64 bytes */
static const unsigned char tiles_16x64[64] __attribute__((aligned(64))) = {
    1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 64, 0, 64, 0, 64, 0, 64, 0, 64, 0, 64, 0, 64, 0, 64, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 16, 16, 16, 16, 16, 16, 16, 16};
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+1e-9*t.tv_nsec;}
int main(void){
  syscall(SYS_arch_prctl, 0x1023, 18); /* ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA */
  _tile_loadconfig(tiles_16x64); /* a constant: gcc may drop stores to a stack config */
  size_t bytes=24u<<20; uint8_t*b=aligned_alloc(4096,bytes); memset(b,1,bytes);
  uint8_t*a=aligned_alloc(4096,1<<16); memset(a,1,1<<16);
  for(int mode=0;mode<2;mode++) for(int rep=0;rep<5;rep++){
    double t0=now();
    if(mode==0){ /* strided: 4 units per 256-byte step; pass over units 0-1 then 2-3 per 256 KB panel */
      for(size_t p=0;p<bytes;p+=262144) for(int up=0;up<2;up++) for(size_t t=0;t<262144;t+=4096){
        const uint8_t*bb=b+p+t+up*128; _tile_loadd(4,a,64); _tile_loadd(6,bb,256); _tile_loadd(7,bb+64,256);
        _tile_dpbsud(0,4,6); _tile_dpbsud(1,4,7); }
    } else { /* contiguous tiles */
      for(size_t p=0;p<bytes;p+=2048){ const uint8_t*bb=b+p; _tile_loadd(4,a,64); _tile_loadd(6,bb,64); _tile_loadd(7,bb+1024,64);
        _tile_dpbsud(0,4,6); _tile_dpbsud(1,4,7); }
    }
    double dt=now()-t0; printf("%s: %.3f ms (%.1f GB/s)\n", mode?"contiguous 1KB":"stride 256  ", dt*1e3, bytes/dt*1e-9);
  }
  _tile_release(); return 0;
}

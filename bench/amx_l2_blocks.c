/* The AMX kernel's 2 x 2 tile block (4 C tiles, 2 A and 2 B tile loads per 4 TDPBSUD) over blocks
 * of A and B of several sizes, from all in L1 (4 KB each) through L2-sized blocks (256 KB - 1 MB)
 * to A streamed from L3 (14 MB, as the driver's prefill block reads x in tile order), with the
 * C tiles zeroed or loaded from memory per block: the ceiling each level of the memory hierarchy
 * puts on the tile loop. One thread. The numbers behind docs/performance.md's AMX section of
 * 2026-12-02; not part of the build (x86-64 with AMX only):
 *   cc -O2 -mamx-tile -mamx-int8 -mavx512f bench/amx_l2_blocks.c -o amx_l2_blocks */
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
static void cfg(void){
  syscall(SYS_arch_prctl, 0x1023, 18);
  static const unsigned char c[64] __attribute__((aligned(64))) = {1,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,
   64,0,64,0,64,0,64,0,64,0,64,0,64,0,64,0, 0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0, 16,16,16,16,16,16,16,16};
  _tile_loadconfig(c);
}
/* A: mb row blocks, each kt k tiles of 2 KB (two 16-row tiles, 1 KB each, contiguous)
 * B: nb unit pairs, each kt k tiles: 16 rows x 128 bytes (row stride 128: 2 units) = 2 KB
 * C: mb x nb blocks of 4 KB (4 tiles) */
static void run(int mb,int nb,int kt,const int8_t*A,const uint8_t*B,int32_t*C,int cload){
  for(int n=0;n<nb;n++) for(int m=0;m<mb;m++){
    int32_t*c=C+((size_t)m*nb+n)*1024;
    if(cload){_tile_loadd(0,c,64);_tile_loadd(1,c+256,64);_tile_loadd(2,c+512,64);_tile_loadd(3,c+768,64);}
    else {_tile_zero(0);_tile_zero(1);_tile_zero(2);_tile_zero(3);}
    const int8_t*a=A+(size_t)m*kt*2048; const uint8_t*b=B+(size_t)n*kt*2048;
    for(int t=0;t<kt;t++){
      _tile_loadd(4,a+2048*t,64);
      _tile_loadd(6,b+2048*t,128);
      _tile_loadd(5,a+2048*t+1024,64);
      _tile_dpbsud(0,4,6);
      _tile_dpbsud(2,5,6);
      _tile_loadd(7,b+2048*t+64,128);
      _tile_dpbsud(1,4,7);
      _tile_dpbsud(3,5,7);
    }
    _tile_stored(0,c,64);_tile_stored(1,c+256,64);_tile_stored(2,c+512,64);_tile_stored(3,c+768,64);
  }
}
int main(int argc,char**argv){
  cfg();
  int configs[][3]={{1,1,2},{8,8,16},{4,4,32},{16,16,8},{2,8,64},{8,2,64},{16,4,16},{4,16,16},{32,32,4}, {1,4,112},{64,1,112}};
  for(unsigned ci=0;ci<sizeof configs/sizeof configs[0];ci++){
    int mb=configs[ci][0],nb=configs[ci][1],kt=configs[ci][2];
    size_t as=(size_t)mb*kt*2048, bs=(size_t)nb*kt*2048, cs=(size_t)mb*nb*4096;
    int8_t*A=aligned_alloc(4096,as); uint8_t*B=aligned_alloc(4096,bs); int32_t*C=aligned_alloc(4096,cs);
    memset(A,1,as);memset(B,1,bs);memset(C,0,cs);
    for(int cl=0;cl<2;cl++){
      double best=1e9; long ops=(long)mb*nb*kt*4*16*16*64*2;
      int reps= (int)(2e9/ops)+1;
      for(int r=0;r<5;r++){double t0=now(); for(int i=0;i<reps;i++) run(mb,nb,kt,A,B,C,cl); double t=(now()-t0)/reps; if(t<best)best=t;}
      printf("mb %2d nb %2d kt %3d  A %5zu KB B %5zu KB C %5zu KB cload %d: %7.0f GOPS\n",mb,nb,kt,as>>10,bs>>10,cs>>10,cl,ops/best/1e9);
    }
    free(A);free(B);free(C);
  }
  return 0;
}

"""The AMX form of the CPU's scaled 8-bit GEMM (a schedule's ``amx``; Intel Xeons with AMX-INT8, from Sapphire
Rapids): the packed form's driver (``scaled_gemm_packed_c.py``: B packed a call into panels of four K bytes of a
column to a 32-bit word, flipped to unsigned, the A row sums giving back the flip) with its tile made of AMX tiles.

A tile is 32 rows of A x 32 columns of B: two A tiles (16 rows x 64 bytes of K, read in place at A's row stride),
two B tiles (16 words of K x 16 columns: the packed panel's rows as they are, at its 128-byte stride) and four
int32 C tiles, multiplied by ``tdpbsud`` (signed A bytes by the unsigned flipped B) over the K chunk, then stored
into the packed form's result block for its finish (scales, epilogue, C's type). K is padded to 64 bytes (``KALIGN``:
A through the padded copy where K is not a multiple of 64, B's panels zero there). Fewer than 32 rows (M's edge)
configure the tiles with fewer rows. A thread configures its tiles when a tile's rows differ from the last one's
(``ldtilecfg`` zeroes them; else the C tiles are zeroed) within one call of its work, and releases them after it
(the tile state is the thread's, and other code may use AMX on that thread between calls).

Linux hands a process the AMX tile state only on request (``arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)``):
asked once, before the first call's workers start. Where it is refused (a kernel before 5.16) the same panels run
the VNNI form's 12-row tiles instead (``tr_amx_or_vnni``): slower, never a failed call; so do they where the
environment sets ``TRACEA_NO_AMX`` (not "0") when a process's first AMX-form call runs. The tile functions carry
the target attribute and the source is compiled with ``-mamx-tile -mamx-int8`` (``core_flags``), which GCC 11 and
Clang 12 on accept; ``has_amx`` asks that the compiler know AMX before the form is chosen.
"""

from __future__ import annotations

AMX_C = r"""
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#define TR_AMX_FN __attribute__((target("amx-tile,amx-int8")))
typedef struct __attribute__((aligned(64))) {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tr_tilecfg;

/* tmm0, tmm1: C's rows 0-15 (columns 0-15, 16-31); tmm2, tmm3: its rows 16-31; tmm4, tmm5: A's two 16-row groups;
   tmm6, tmm7: B's two 16-column groups (16 words of K) */
TR_AMX_FN static void tr_amx_config(int R) {
    tr_tilecfg c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    const int r0 = R < 16 ? R : 16, r1 = R > 16 ? R - 16 : 0;
    c.rows[0] = c.rows[1] = c.rows[4] = (uint8_t)r0;
    c.colsb[0] = c.colsb[1] = c.colsb[4] = 64;
    if (r1) {
        c.rows[2] = c.rows[3] = c.rows[5] = (uint8_t)r1;
        c.colsb[2] = c.colsb[3] = c.colsb[5] = 64;
    }
    c.rows[6] = c.rows[7] = 16;
    c.colsb[6] = c.colsb[7] = 64;
    _tile_loadconfig(&c);
}

/* R (<= 32) rows of A at a (row stride lda) x the panel's 32 columns over k4n words of K (a multiple of 16): the
   int32 sums to res[r * NR + c]. *rows: the rows the thread's tiles are configured for (-1: none yet this call) */
TR_AMX_FN static void tr_amx_tile(int R, const int8_t* a, long lda, const uint8_t* bp, long k4n, int32_t* res,
                                  int* rows) {
    if (R != *rows) {
        tr_amx_config(R);  /* (zeroes every tile) */
        *rows = R;
    } else {
        _tile_zero(0);
        _tile_zero(1);
        if (R > 16) { _tile_zero(2); _tile_zero(3); }
    }
    if (R > 16) {
        for (long q = 0; q < k4n; q += 16) {
            _tile_loadd(4, a + 4 * q, lda);
            _tile_loadd(5, a + 16 * lda + 4 * q, lda);
            _tile_loadd(6, bp + q * 4 * NR, 4 * NR);
            _tile_loadd(7, bp + q * 4 * NR + 64, 4 * NR);
            _tile_dpbsud(0, 4, 6);
            _tile_dpbsud(1, 4, 7);
            _tile_dpbsud(2, 5, 6);
            _tile_dpbsud(3, 5, 7);
        }
        _tile_stored(2, res + 16 * NR, 4 * NR);
        _tile_stored(3, res + 16 * NR + 16, 4 * NR);
    } else {
        for (long q = 0; q < k4n; q += 16) {
            _tile_loadd(4, a + 4 * q, lda);
            _tile_loadd(6, bp + q * 4 * NR, 4 * NR);
            _tile_loadd(7, bp + q * 4 * NR + 64, 4 * NR);
            _tile_dpbsud(0, 4, 6);
            _tile_dpbsud(1, 4, 7);
        }
    }
    _tile_stored(0, res, 4 * NR);
    _tile_stored(1, res + 16, 4 * NR);
}

TR_AMX_FN static void tr_amx_release(void) { _tile_release(); }

/* Without the OS's tile state the same panels run the VNNI tiles (packed_table's 12-row tiles of two vectors), R
   rows of the block 12 at a time, into the same result block */
static int tr_amx_ok = 0;
static void tr_amx_or_vnni(int R, const int8_t* a, long lda, const uint8_t* bp, long k4n, int32_t* res, int* rows) {
    if (tr_amx_ok) {
        tr_amx_tile(R, a, lda, bp, k4n, res, rows);
        return;
    }
    for (int r = 0; r < R; r += 12) {
        const int n = R - r < 12 ? R - r : 12;
        TR_PTILES[n - 1](a + r * lda, lda, bp, k4n, res + r * NR);
    }
}

/* the process's permission to use the AMX tile data (Linux 5.16+), asked once (under the call mutex): tr_amx_ok */
static void tr_amx_permit(void) {
    static int done = 0;
    if (!done) {
        const char* no = getenv("TRACEA_NO_AMX");  /* set (not "0"): the VNNI tiles, as where the OS refuses */
        tr_amx_ok = !(no && *no && strcmp(no, "0")) &&
                    syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) == 0;
        done = 1;
    }
}
"""

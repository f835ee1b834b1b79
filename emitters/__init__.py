"""Tracea's L4 semantic IR and L5 emitters: schedules, layout and swizzle algebra, the bank-conflict
simulator, and one renderer + compiler + runtime per backend."""

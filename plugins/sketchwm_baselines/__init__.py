"""Baseline watermarks for DLMs (red-green, KGW, Unigram, AAR Gumbel, KTH EXP-edit, DMark, position Gumbel, dgMARK).

Each scheme lives in its own module and is registered through the ``sketchwm`` entry-point group
(``baselines = "sketchwm_baselines"``), exactly like the built-in global sketch scheme:

* ``red-green-dlm`` — Gloaguen et al. 2025 (:mod:`.red_green_dlm`)
* ``kgw-naive``     — Kirchenbauer et al. 2023 on decoded contexts only (:mod:`.kgw_naive`)
* ``unigram``       — Zhao et al. 2023 (:mod:`.unigram`)
* ``aar-gumbel``    — Aaronson's Gumbel-max (:mod:`.aar_gumbel`)
* ``kth-exp-edit``  — Kuditipudi et al. 2024 EXP-edit (:mod:`.kth_exp_edit`)
* ``dmark``         — Wu et al. 2025, DMark (:mod:`.dmark`)
* ``gumbel-position`` — Bagchi et al. 2025, position-seeded Gumbel-max (:mod:`.gumbel_position`)
* ``dgmark``        — Hong & No 2026, order steering with a keyed parity (:mod:`.dgmark`)
"""

from __future__ import annotations

from sketchwm.hookspecs import hookimpl

from .aar_gumbel import AARGumbelScheme
from .dgmark import DGMarkScheme
from .dmark import DMarkScheme
from .gumbel_position import GumbelPositionScheme
from .kgw_naive import KGWNaiveScheme
from .kth_exp_edit import KTHExpEditScheme
from .red_green_dlm import RedGreenDLMScheme
from .unigram import UnigramScheme

__all__ = ["RedGreenDLMScheme", "KGWNaiveScheme", "UnigramScheme", "AARGumbelScheme", "KTHExpEditScheme", "DMarkScheme",
           "GumbelPositionScheme", "DGMarkScheme"]


@hookimpl
def sketchwm_register_schemes() -> list[type]:
    """Register the baseline schemes."""
    return [RedGreenDLMScheme, KGWNaiveScheme, UnigramScheme, AARGumbelScheme, KTHExpEditScheme, DMarkScheme,
            GumbelPositionScheme, DGMarkScheme]

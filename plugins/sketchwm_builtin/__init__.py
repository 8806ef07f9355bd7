"""Built-in sketchwm plugins: Count-Sketch, score functions, the global sketch watermark, DLM backends,
remasking rules.

They register through the ``sketchwm`` entry-point group exactly as third-party plugins do, one
entry point per kind (``pyproject.toml``): the sketch, the scores, the backends and the remasking
rules through their own modules' hooks, the schemes and the ``sketchwm prior`` command through
:mod:`sketchwm_builtin.register`, which only registers.
"""

"""Built-in sketchwm plugins: Count-Sketch, score functions, the global sketch watermark, DLM backends,
remasking rules.

They register through the ``sketchwm`` entry-point group exactly as third-party plugins do.
"""

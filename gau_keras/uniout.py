"""bert4keras's ``uniout``: on Python 2 it made ``print`` show Chinese instead
of escapes. Python 3 prints unicode as it is, so this module does nothing;
it exists so that ``from gau_keras.snippets import uniout`` (the bert4keras
idiom) and ``import gau_keras.uniout`` keep working.
"""

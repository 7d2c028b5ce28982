"""The Keras 2 face that bert4keras-era code expects, around Keras 3 (which is not patched).

* ``model.Model``: a ``keras.Model`` whose instances accept Keras 2's calls
  (``fit_generator`` and friends, nested Python lists, ``y_true`` cast to the
  output's dtype, saving under any file name); ``build_transformer_model``
  returns one, and the ``keras`` of ``gau_keras.backend`` makes one.
* ``saving``: whole-model files under bert4keras-era names.
* ``nodes``: ``get_output_at`` and its kin on gau_keras's layers.
* ``keras2``: the ``keras`` namespace ``gau_keras.backend`` hands out: Keras 3
  with the Keras 2 names added (``keras.models.Model`` is ``model.Model``,
  ``keras.losses.kullback_leibler_divergence``, ...).
* ``keras2_backend``: that namespace's ``backend`` (``K``), Keras 2's backend
  functions on ``keras.ops``.
* ``jax_training``: on JAX, ``Loss.add_metric`` and metrics that read weights
  (CRF, MEMM), wrapped into keras.Model's training methods when such a layer is
  built, for the models that contain one.

Importing gau_keras changes nothing in Keras; a plain ``keras.Model`` in the same
process behaves as without gau_keras, also after such a layer was built.
What Keras 3 cannot do at all (a replaced ``train_function``, ``K.gradients``
outside a traced function, ``K.set_learning_phase``) raises an error that
names the README's porting section (``PORTING``).
"""

#: where the README tells what replaces a Keras 2 call that has no Keras 3 form
PORTING = "README.md, 'Porting from bert4keras'"

"""GAU-alpha's presets: name -> a function giving the model directory."""


def gau_alpha_tiny():
    """The small GAU-alpha shipped inside the package (gau_keras/pretrained/gau_alpha_tiny,
    see its TRAINING.md)."""
    from gau_keras.pretrained import default_model_dir

    return default_model_dir()

"""One module per anchor library. Each defines:
    CAN       the LossScaleOptions fields its scaler's constructor takes (harness.cases picks the cases)
    header()  the golden file's first line (library, version, the object driven, the preset it checks,
              the precision it keeps the scale in, and which getter each recorded value comes from)
    make(options) -> scaler     the library's own object, built with the preset's options overridden
    step(scaler, finite)        one optimizer step whose gradients are all finite (or not)
    read(scaler) -> {name: value}   the values named in header()["values"], after the step
    RAISES    (optional) the exception types by which the library refuses a step: the case ends there
"""

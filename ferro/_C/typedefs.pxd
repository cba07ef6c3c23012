# Shared ctypedefs for ferro's compiled core (one place, as in scikit-learn's utils/_typedefs.pxd).

ctypedef fused floating_t:
    float
    double

"""Default values of the backend options (see settings.QnnSettings for what each means)."""

DEVICE = "auto"
STRICT = False
FP16 = False
CACHE = False
CACHE_DIR = None
KV_CACHE = False
SOC_MODEL = None
HTP_ARCH = None
OPT_LEVEL = None
LOG_LEVEL = None
EXPORTER = "torchscript"
DRY_RUN = False
CHECK_NAN = True
FIX_INPUTS = None
QUANTIZE = None
CALIBRATION = None
OBSERVER = "minmax"
PER_CHANNEL = True
WEIGHT_ROUNDING = "nearest"
QUANTIZE_MODULES = None
QUANTIZE_OPS = None
TARGET_SQNR_DB = None
MIN_PARTITION_SIZE = 3
PARTITION_COST = "measure"

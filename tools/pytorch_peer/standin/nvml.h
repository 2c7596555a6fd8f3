// Host-only stand-in for <nvml.h> (tools/pytorch_peer): the declarations c10/cuda/driver_api.h
// names. There is no NVML behind them: the stand-in's DriverAPI reports no NVML handle, which
// c10 treats as NVML being absent.
#pragma once

typedef enum nvmlReturn_enum { NVML_SUCCESS = 0, NVML_ERROR_INSUFFICIENT_SIZE = 7 } nvmlReturn_t;
typedef struct nvmlDevice_st* nvmlDevice_t;
typedef struct nvmlProcessInfo_v1_st {
  unsigned int pid;
  unsigned long long usedGpuMemory;
} nvmlProcessInfo_v1_t;
typedef struct nvmlPciInfo_st {
  char busId[32];
} nvmlPciInfo_t;
typedef int nvmlIntNvLinkDeviceType_t;
#define NVML_DEVICE_PCI_BUS_ID_FMT "%08X:%02X:%02X.0"

extern "C" {
nvmlReturn_t nvmlInit_v2(void);
nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char* bus_id, nvmlDevice_t* device);
nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t device, unsigned int link,
                                                 nvmlIntNvLinkDeviceType_t* type);
nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned int link,
                                                 nvmlPciInfo_t* pci);
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device, unsigned int* count,
                                                  nvmlProcessInfo_v1_t* infos);
}

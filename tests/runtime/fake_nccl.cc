// A stand-in for libnccl.so.2 that the loader opens through MW_NCCL_LIBRARY: every function the
// backend binds, doing nothing, and an ncclGetVersion that reports NCCL 2.18.3, older than the
// backend needs. Built with MW_FAKE_NCCL_PARTIAL it has ncclGetVersion only.
extern "C" {

int ncclGetVersion(int* version) {
  *version = 21803;
  return 0;
}

#ifndef MW_FAKE_NCCL_PARTIAL
#define MW_FAKE_NCCL(name) \
  int name() { return 0; }
MW_FAKE_NCCL(ncclGetUniqueId)
MW_FAKE_NCCL(ncclCommInitRankConfig)
MW_FAKE_NCCL(ncclCommGetAsyncError)
MW_FAKE_NCCL(ncclCommAbort)
MW_FAKE_NCCL(ncclGetErrorString)
MW_FAKE_NCCL(ncclGetLastError)
MW_FAKE_NCCL(ncclGroupStart)
MW_FAKE_NCCL(ncclGroupEnd)
MW_FAKE_NCCL(ncclSend)
MW_FAKE_NCCL(ncclRecv)
MW_FAKE_NCCL(ncclBroadcast)
MW_FAKE_NCCL(ncclAllReduce)
MW_FAKE_NCCL(ncclReduce)
MW_FAKE_NCCL(ncclAllGather)
MW_FAKE_NCCL(ncclReduceScatter)
MW_FAKE_NCCL(ncclCommCount)
#endif

}  // extern "C"

"""How tests/data/kineto_h200_2steps.json.gz was made (NOTE [kineto attribution]): this script,
run as is on one NVIDIA H200 (torch 2.11.0+cu130, python3 /tmp/g.py), wrote the trace; the
args that attribute() does not read ("Input Dims", "Input Strides", "Concrete Inputs",
"Input type", "Record function id", "Ev Idx", and the kernels' launch statistics:
registers, shared memory, grid, block, occupancy, queued, context) were then removed and
kernel names cut to 80 characters, to keep the file small (630 kB of JSON, 56 kB gzipped).
The hooks are a minimal inline version of kineto.module_ranges (the script ran outside
this repo).
Not collected by pytest."""
import torch,torch.nn as nn,gzip,shutil,os
from torch.profiler import profile,ProfilerActivity as A,record_function as rf
torch.manual_seed(0)
class N(nn.Module):
 def __init__(s):
  super().__init__();s.c=nn.Sequential(nn.Conv2d(3,8,3,padding=1),nn.BatchNorm2d(8),nn.ReLU());s.lin=nn.Linear(512,16);s.enc=nn.TransformerEncoderLayer(16,2,32,0.1,batch_first=True);s.out=nn.Linear(16,10)
 def forward(s,x):
  h=s.lin(s.c(x).flatten(1)).unsqueeze(1).repeat(1,4,1);return s.out(s.out2(s.enc(h).mean(1)))
 def out2(s,h):return s.lin2(h)
m=N();m.lin2=nn.Linear(16,16);m=m.cuda();o=torch.optim.AdamW(m.parameters())
x=torch.randn(2,3,8,8,device='cuda');y=torch.tensor([1,2],device='cuda')
L={}
def pre(d,a,n):r=rf(n);r.__enter__();L.setdefault(id(d),[]).append(r)
def post(d,a,u):L[id(d)].pop().__exit__(None,None,None)
for p,d in m.named_modules():
 d.register_forward_pre_hook(lambda d,a,n='vdnnsim.module::'+p:pre(d,a,n));d.register_forward_hook(post)
def step():
 o.zero_grad(set_to_none=False);l=nn.functional.cross_entropy(m(x),y);l.backward();l.item();o.step()
for _ in range(3):step()
torch.cuda.synchronize()
with profile(activities=[A.CPU,A.CUDA],record_shapes=True,profile_memory=True) as pr:
 for k in range(2):
  with rf(f'vdnnsim.step#{k}'):step()
 torch.cuda.synchronize()
pr.export_chrome_trace('/tmp/t.json')
with open('/tmp/t.json','rb') as f,gzip.open(os.environ['OUT']+'/cuda_trace.json.gz','wb') as g:shutil.copyfileobj(f,g)
print(torch.__version__,torch.cuda.get_device_name(),os.path.getsize('/tmp/t.json'))

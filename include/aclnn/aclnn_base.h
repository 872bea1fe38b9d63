/* The vendor declares the aclnn tensor types in aclnn/aclnn_base.h; qmoe keeps them in
 * aclnnop/aclnn_base.h. This forwarding header lets programs include either path. */
#ifndef QMOE_ACLNN_ACLNN_BASE_H
#define QMOE_ACLNN_ACLNN_BASE_H
#include "aclnnop/aclnn_base.h"
#endif
